#include "model/gguf_reader.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "graph/type.h"
#include "gtest/gtest.h"
#include "model/ggml_type.h"
#include "model/gguf_value.h"
#include "model/gguf_writer.h"

namespace tessera {
namespace {

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kArray = 9;
constexpr uint32_t kString = 8;
constexpr uint32_t kUint32 = 4;
constexpr uint32_t kUint64 = 10;

// Builds files byte by byte, valid or not.
class Builder {
 public:
  Builder& Raw(absl::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  template <typename T>
  Builder& Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(v));
    return *this;
  }
  Builder& U32(uint32_t v) { return Put(v); }
  Builder& U64(uint64_t v) { return Put(v); }
  Builder& Str(absl::string_view s) { return U64(s.size()).Raw(s); }
  Builder& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return Raw("GGUF").U32(version).U64(n_tensors).U64(n_kv);
  }
  // A uint32 KV.
  Builder& KvU32(absl::string_view key, uint32_t v) {
    return Str(key).U32(kUint32).U32(v);
  }
  Builder& Tensor(absl::string_view name, std::vector<uint64_t> ne,
                  int32_t type, uint64_t offset) {
    Str(name).U32(ne.size());
    for (uint64_t n : ne) U64(n);
    return Put(type).U64(offset);
  }
  Builder& PadTo(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
    return *this;
  }
  Builder& Fill(size_t n, uint8_t value) {
    bytes_.insert(bytes_.end(), n, value);
    return *this;
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

absl::Status Parse(const Builder& b) {
  return GgufFile::FromBytes(b.bytes()).status();
}

void ExpectError(const Builder& b, absl::StatusCode code,
                 absl::string_view substring) {
  absl::Status status = Parse(b);
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), substring))
      << status.message() << "\n  does not contain: " << substring;
  EXPECT_TRUE(absl::StartsWith(status.message(), "[GGUF] ")) << status;
}

// Two f32 tensors: "a" [2] at 0 and "b" [3] at 32, one string KV.
Builder TwoTensors(uint32_t version) {
  Builder b;
  b.Header(version, 2, 1).Str("general.name").U32(kString).Str("tiny");
  b.Tensor("a", {2}, kGgmlF32, 0).Tensor("b", {3}, kGgmlF32, 32);
  b.PadTo(32).Fill(8, 0xAA).Fill(24, 0).Fill(12, 0xBB);
  return b;
}

TEST(GgufReaderTest, ReadsAHandBuiltFile) {
  for (uint32_t version : {2u, 3u}) {
    const Builder b = TwoTensors(version);
    absl::StatusOr<std::unique_ptr<GgufFile>> file =
        GgufFile::FromBytes(b.bytes());
    ASSERT_TRUE(file.ok()) << file.status();
    const GgufFile& f = **file;
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.alignment(), 32u);
    EXPECT_EQ(*f.GetString("general.name"), "tiny");
    EXPECT_EQ(f.data_offset() % 32, 0u);
    EXPECT_EQ(f.data_offset(), b.size() - 44);
    ASSERT_EQ(f.tensors().size(), 2u);
    const GgufTensor* a = f.FindTensor("a");
    const GgufTensor* t = f.FindTensor("b");
    ASSERT_NE(a, nullptr);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(f.FindTensor("c"), nullptr);
    EXPECT_EQ(a->n_dims, 1);
    EXPECT_EQ(a->ne, (std::array<int64_t, 4>{2, 1, 1, 1}));
    EXPECT_EQ(a->type, Type::kF32);
    EXPECT_EQ(a->num_bytes, 8u);
    EXPECT_EQ(a->data.data(), f.bytes().data() + f.data_offset());
    EXPECT_EQ(a->data, std::vector<uint8_t>(8, 0xAA));
    EXPECT_EQ(t->offset, 32u);
    EXPECT_EQ(t->NumElements(), 3);
    EXPECT_EQ(t->data, std::vector<uint8_t>(12, 0xBB));
  }
}

TEST(GgufReaderTest, FilesWithoutTensorsHaveNoPadding) {
  Builder b;
  b.Header(3, 0, 1).KvU32("x", 1);
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(b.bytes());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->data_offset(), b.size());
  Builder empty;
  empty.Header(3, 0, 0);
  EXPECT_TRUE(Parse(empty).ok());
}

TEST(GgufReaderTest, HonorsTheAlignmentKey) {
  Builder b;
  b.Header(3, 2, 1).KvU32("general.alignment", 64);
  b.Tensor("a", {2}, kGgmlF32, 0).Tensor("b", {2}, kGgmlF32, 64);
  b.PadTo(64).Fill(72, 1);
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(b.bytes());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->alignment(), 64u);
  EXPECT_EQ((*file)->data_offset() % 64, 0u);
  // Offset 32 is a multiple of the default alignment but not of 64.
  Builder bad;
  bad.Header(3, 2, 1).KvU32("general.alignment", 64);
  bad.Tensor("a", {2}, kGgmlF32, 0).Tensor("b", {2}, kGgmlF32, 32);
  bad.PadTo(64).Fill(72, 1);
  ExpectError(bad, absl::StatusCode::kInvalidArgument,
              "tensor 1 (\"b\"): data offset 32 is not a multiple of the "
              "alignment 64");
}

TEST(GgufReaderTest, KeepsUnknownGgmlTypesAsNumbers) {
  Builder b;
  b.Header(3, 3, 0);
  b.Tensor("iq4_xs", {256}, 23, 0);
  b.Tensor("q4_K", {256}, kGgmlQ4_K, 0);
  b.Tensor("neg", {4}, -1, 160);
  b.PadTo(32).Fill(160, 0);
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(b.bytes());
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufTensor& iq = (*file)->tensors()[0];
  EXPECT_EQ(iq.ggml_type, 23);
  EXPECT_EQ(iq.type, std::nullopt);
  EXPECT_EQ(iq.num_bytes, std::nullopt);
  EXPECT_TRUE(iq.data.empty());
  EXPECT_EQ(iq.TesseraType().status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(iq.TesseraType().status().message(),
            "[GGUF] tensor \"iq4_xs\": ggml type 23 has no tessera type");
  const GgufTensor& q4k = (*file)->tensors()[1];
  EXPECT_EQ(q4k.num_bytes, 144u);
  EXPECT_EQ(q4k.data.size(), 144u);
  EXPECT_EQ(q4k.type, Type::kQ4_K);
  EXPECT_EQ(*q4k.TesseraType(), Type::kQ4_K);
  EXPECT_EQ((*file)->tensors()[2].ggml_type, -1);
}

TEST(GgufReaderTest, OpenReportsFileErrors) {
  absl::Status missing = GgufFile::Open("/nonexistent/model.gguf").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_TRUE(absl::StrContains(missing.message(), "/nonexistent/model.gguf"));
  const std::string dir = std::getenv("TEST_TMPDIR");
  EXPECT_EQ(GgufFile::Open(dir).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string empty = dir + "/empty.gguf";
  std::fclose(std::fopen(empty.c_str(), "wb"));
  absl::Status status = GgufFile::Open(empty).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_TRUE(absl::StartsWith(status.message(), "[GGUF] " + empty + ": "));
}

// A file with every value type and tensors of several types.
std::vector<uint8_t> SmallValidFile(uint64_t* data_end) {
  GgufWriter writer;
  EXPECT_TRUE(writer.AddKv("general.architecture", std::string("llama")).ok());
  EXPECT_TRUE(writer.AddKv("general.alignment", uint32_t{16}).ok());
  EXPECT_TRUE(writer.AddKv("u8", uint8_t{1}).ok());
  EXPECT_TRUE(writer.AddKv("i16", int16_t{-2}).ok());
  EXPECT_TRUE(writer.AddKv("f32", 0.5f).ok());
  EXPECT_TRUE(writer.AddKv("b", true).ok());
  EXPECT_TRUE(writer.AddKv("u64", uint64_t{7}).ok());
  EXPECT_TRUE(writer.AddKv("f64", 0.25).ok());
  EXPECT_TRUE(writer
                  .AddKv("tokens",
                         GgufArray(std::vector<std::string>{"<s>", "a", "bc"}))
                  .ok());
  EXPECT_TRUE(
      writer.AddKv("scores", GgufArray(std::vector<float>{0, 1, 2})).ok());
  EXPECT_TRUE(
      writer.AddKv("flags", GgufArray(std::vector<bool>{true, false})).ok());
  EXPECT_TRUE(
      writer.AddTensor("w", kGgmlF16, {3, 2}, std::vector<uint8_t>(12, 1))
          .ok());
  EXPECT_TRUE(
      writer.AddTensor("q", kGgmlQ8_0, {32}, std::vector<uint8_t>(34, 2)).ok());
  std::vector<uint8_t> bytes = writer.WriteToBytes();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(bytes);
  EXPECT_TRUE(file.ok()) << file.status();
  const GgufTensor& last = (*file)->tensors().back();
  *data_end = (*file)->data_offset() + last.offset + *last.num_bytes;
  return bytes;
}

TEST(GgufReaderTest, EveryTruncationFailsCleanly) {
  uint64_t data_end = 0;
  const std::vector<uint8_t> bytes = SmallValidFile(&data_end);
  ASSERT_GT(data_end, 0u);
  for (size_t n = 0; n < data_end; ++n) {
    absl::Status status =
        GgufFile::FromBytes(absl::MakeConstSpan(bytes).first(n)).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss)
        << "prefix of " << n << " bytes: " << status;
  }
  // Past the last tensor only padding is cut.
  for (size_t n = data_end; n <= bytes.size(); ++n) {
    EXPECT_TRUE(GgufFile::FromBytes(absl::MakeConstSpan(bytes).first(n)).ok());
  }
}

TEST(GgufReaderTest, RandomByteFlipsNeverCrash) {
  uint64_t data_end = 0;
  const std::vector<uint8_t> valid = SmallValidFile(&data_end);
  std::mt19937 rng(20240607);
  int parsed = 0;
  for (int iteration = 0; iteration < 4000; ++iteration) {
    std::vector<uint8_t> bytes = valid;
    const int flips = 1 + rng() % 4;
    for (int i = 0; i < flips; ++i) {
      uint8_t& byte = bytes[rng() % bytes.size()];
      // Half of the flips set a byte to an extreme value.
      byte = rng() % 2 ? static_cast<uint8_t>(rng()) : (rng() % 2 ? 0xFF : 0);
    }
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::FromBytes(bytes);
    if (!file.ok()) {
      EXPECT_TRUE(absl::StartsWith(file.status().message(), "[GGUF] "));
      continue;
    }
    ++parsed;
    const absl::Span<const uint8_t> all = (*file)->bytes();
    for (const GgufTensor& t : (*file)->tensors()) {
      if (t.data.empty()) continue;
      EXPECT_GE(t.data.data(), all.data());
      EXPECT_LE(t.data.data() + t.data.size(), all.data() + all.size());
    }
  }
  EXPECT_GT(parsed, 0);  // Flips of data bytes keep the file valid.
}

TEST(GgufReaderTest, RefusesHugeStringLengths) {
  Builder key;
  key.Header(3, 0, 1).U64(kU64Max).Fill(20, 0);
  ExpectError(key, absl::StatusCode::kDataLoss,
              "key 0: key: string length 18446744073709551615 exceeds the 20 "
              "bytes left (at byte 24)");
  Builder value;
  value.Header(3, 0, 1).Str("general.name").U32(kString).U64(kU64Max);
  value.Fill(20, 0);
  ExpectError(value, absl::StatusCode::kDataLoss,
              "key 0 (\"general.name\"): value: string length "
              "18446744073709551615 exceeds the 20 bytes left");
  Builder name;
  name.Header(3, 1, 0).U64(uint64_t{1} << 40).Fill(64, 0);
  ExpectError(name, absl::StatusCode::kDataLoss,
              "tensor 0: name: string length 1099511627776 exceeds the 64 "
              "bytes left");
  Builder element;
  element.Header(3, 0, 1).Str("tokens").U32(kArray).U32(kString).U64(2);
  element.Str("ok").U64(kU64Max - 1);
  ExpectError(element, absl::StatusCode::kDataLoss,
              "key 0 (\"tokens\"): element 1: string length");
}

TEST(GgufReaderTest, RefusesHugeCounts) {
  Builder kvs;
  kvs.Header(3, 0, kU64Max).Fill(100, 0);
  ExpectError(kvs, absl::StatusCode::kDataLoss,
              "KV count 18446744073709551615 needs at least 14 bytes per "
              "key/value pair but only 100 bytes are left");
  Builder tensors;
  tensors.Header(3, uint64_t{1} << 60, 0).Fill(100, 0);
  ExpectError(tensors, absl::StatusCode::kDataLoss, "tensor count");
  Builder array;
  array.Header(3, 0, 1).Str("a").U32(kArray).U32(kUint32).U64(uint64_t{1}
                                                              << 62);
  array.Fill(16, 0);
  ExpectError(array, absl::StatusCode::kDataLoss,
              "key 0 (\"a\"): array of 4611686018427387904 uint32 needs at "
              "least 4 bytes per element but only 16 bytes are left");
  Builder strings;
  strings.Header(3, 0, 1).Str("a").U32(kArray).U32(kString).U64(3);
  strings.Fill(16, 0);
  ExpectError(strings, absl::StatusCode::kDataLoss, "array of 3 string");
}

TEST(GgufReaderTest, RefusesBadShapes) {
  Builder dims;
  dims.Header(3, 1, 0).Tensor("t", {1, 1, 1, 1, 1}, kGgmlF32, 0).PadTo(32);
  dims.Fill(32, 0);
  ExpectError(dims, absl::StatusCode::kInvalidArgument,
              "tensor 0 (\"t\"): n_dims 5 exceeds 4");
  Builder huge;
  huge.Header(3, 1, 0).Tensor("t", {1, kU64Max}, kGgmlF32, 0).PadTo(32);
  ExpectError(huge, absl::StatusCode::kInvalidArgument,
              "ne[1] = 18446744073709551615 exceeds INT64_MAX");
  Builder product;
  product.Header(3, 1, 0)
      .Tensor("t", {uint64_t{1} << 32, uint64_t{1} << 32}, kGgmlF32, 0)
      .PadTo(32);
  ExpectError(product, absl::StatusCode::kInvalidArgument,
              "the element count overflows int64 at ne[1]");
  Builder unknown_product;  // Checked for types without a layout too.
  unknown_product.Header(3, 1, 0)
      .Tensor("t", {uint64_t{1} << 62, 4}, 99, 0)
      .PadTo(32);
  ExpectError(unknown_product, absl::StatusCode::kInvalidArgument, "overflows");
  Builder bytes;
  bytes.Header(3, 1, 0).Tensor("t", {uint64_t{1} << 62}, kGgmlF32, 0);
  bytes.PadTo(32);
  ExpectError(bytes, absl::StatusCode::kInvalidArgument,
              "byte size of 4611686018427387904 values of f32 (0) overflows");
  Builder block;
  block.Header(3, 1, 0).Tensor("t", {33}, kGgmlQ8_0, 0).PadTo(32);
  block.Fill(64, 0);
  ExpectError(block, absl::StatusCode::kInvalidArgument,
              "ne[0] = 33 is not a multiple of the block size 32 of q8_0");
}

TEST(GgufReaderTest, RefusesBadOffsets) {
  Builder misaligned;
  misaligned.Header(3, 1, 0).Tensor("t", {2}, kGgmlF32, 4).PadTo(32);
  misaligned.Fill(32, 0);
  ExpectError(misaligned, absl::StatusCode::kInvalidArgument,
              "data offset 4 is not a multiple of the alignment 32");
  Builder past;
  past.Header(3, 1, 0).Tensor("t", {2}, kGgmlF32, uint64_t{1} << 40);
  past.PadTo(32).Fill(32, 0);
  ExpectError(past, absl::StatusCode::kDataLoss,
              "data offset 1099511627776 is past the end of the 32-byte data "
              "section");
  Builder near_max;  // offset + size would wrap around.
  near_max.Header(3, 1, 0).Tensor("t", {2}, kGgmlF32, kU64Max - 31);
  near_max.PadTo(32).Fill(32, 0);
  ExpectError(near_max, absl::StatusCode::kDataLoss, "past the end");
  Builder data;
  data.Header(3, 1, 0).Tensor("t", {100}, kGgmlF32, 0).PadTo(32);
  data.Fill(32, 0);
  ExpectError(data, absl::StatusCode::kDataLoss,
              "400 bytes of data at offset 0 run past the end of the 32-byte "
              "data section");
  Builder start;  // The data section's padding is missing.
  start.Header(3, 1, 0).Tensor("t", {0}, kGgmlF32, 0);
  ExpectError(start, absl::StatusCode::kDataLoss, "data section: starts at");
}

TEST(GgufReaderTest, RefusesOverlappingTensors) {
  Builder b;
  b.Header(3, 3, 0);
  b.Tensor("a", {16}, kGgmlF32, 64);
  b.Tensor("empty", {0}, kGgmlF32, 64);  // Zero bytes overlap nothing.
  b.Tensor("b", {24}, kGgmlF32, 0);
  b.PadTo(32).Fill(128, 0);
  ExpectError(b, absl::StatusCode::kInvalidArgument,
              "tensor 2 (\"b\", bytes [0, 96)) overlaps tensor 0 (\"a\", "
              "bytes [64, 128))");
  Builder same;
  same.Header(3, 2, 0);
  same.Tensor("a", {2}, kGgmlF32, 0).Tensor("b", {2}, kGgmlF32, 0);
  same.PadTo(32).Fill(32, 0);
  ExpectError(same, absl::StatusCode::kInvalidArgument, "overlaps");
  // A range inside an earlier, longer one.
  Builder inside;
  inside.Header(3, 3, 0);
  inside.Tensor("long", {64}, kGgmlF32, 0);
  inside.Tensor("short", {2}, kGgmlF32, 32);
  inside.Tensor("inner", {2}, kGgmlF32, 128);
  inside.PadTo(32).Fill(256, 0);
  ExpectError(inside, absl::StatusCode::kInvalidArgument,
              "tensor 0 (\"long\", bytes [0, 256)) overlaps tensor 1");
}

TEST(GgufReaderTest, RefusesDuplicatesAndEmptyKeys) {
  Builder keys;
  keys.Header(3, 0, 2).KvU32("k", 1).KvU32("k", 2);
  ExpectError(keys, absl::StatusCode::kInvalidArgument,
              "key 1 (\"k\"): duplicate key (first at key 0)");
  Builder empty;
  empty.Header(3, 0, 1).KvU32("", 1);
  ExpectError(empty, absl::StatusCode::kInvalidArgument, "empty key");
  Builder names;
  names.Header(3, 2, 0);
  names.Tensor("t", {2}, kGgmlF32, 0).Tensor("t", {2}, kGgmlF32, 32);
  names.PadTo(32).Fill(64, 0);
  ExpectError(names, absl::StatusCode::kInvalidArgument,
              "tensor 1 (\"t\"): duplicate tensor name (first at tensor 0)");
}

TEST(GgufReaderTest, RefusesBadAlignments) {
  for (uint32_t alignment : {0u, 3u, 48u}) {
    Builder b;
    b.Header(3, 0, 1).KvU32("general.alignment", alignment);
    ExpectError(b, absl::StatusCode::kInvalidArgument,
                "is not a non-zero power of two");
  }
  Builder type;
  type.Header(3, 0, 1).Str("general.alignment").U32(kUint64).U64(32);
  ExpectError(type, absl::StatusCode::kInvalidArgument,
              "key \"general.alignment\": must be uint32, not uint64");
}

TEST(GgufReaderTest, RefusesUnknownAndNestedValueTypes) {
  Builder unknown;
  unknown.Header(3, 0, 1).Str("k").U32(13).U32(0);
  ExpectError(unknown, absl::StatusCode::kInvalidArgument,
              "key 0 (\"k\"): unknown value type 13");
  Builder element;
  element.Header(3, 0, 1).Str("k").U32(kArray).U32(0xFFFFFFFF).U64(0);
  ExpectError(element, absl::StatusCode::kInvalidArgument,
              "unknown array element type 4294967295");
  Builder nested;
  nested.Header(3, 0, 1).Str("k").U32(kArray).U32(kArray).U64(1);
  nested.U32(kUint32).U64(1).U32(5);
  ExpectError(nested, absl::StatusCode::kInvalidArgument,
              "nested arrays are not supported");
}

TEST(GgufReaderTest, RefusesBadMagicAndVersions) {
  Builder magic;
  magic.Raw("GGML").U32(3).U64(0).U64(0);
  ExpectError(magic, absl::StatusCode::kInvalidArgument,
              "header: bad magic \"GGML\", expected \"GGUF\" (at byte 0)");
  Builder v1;
  v1.Header(1, 0, 0);
  ExpectError(v1, absl::StatusCode::kInvalidArgument,
              "GGUF version 1 is not supported (only 2 and 3)");
  for (uint32_t version : {0u, 4u, 0xFFFFFFFFu}) {
    Builder b;
    b.Header(version, 0, 0);
    ExpectError(b, absl::StatusCode::kInvalidArgument,
                "unsupported GGUF version");
  }
  // A big-endian version 3 file (its counts would be swapped too).
  Builder big_endian;
  big_endian.Header(0x03000000, 0, 0);
  ExpectError(big_endian, absl::StatusCode::kInvalidArgument,
              "version 0x3000000 looks byte-swapped: big-endian GGUF files "
              "are not supported");
}

}  // namespace
}  // namespace tessera
