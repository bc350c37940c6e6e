#include "model/gguf_writer.h"

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph/type.h"
#include "gtest/gtest.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"
#include "model/gguf_value.h"

namespace tessera {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

std::unique_ptr<GgufFile> ReadBack(const GgufWriter& writer) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(writer.WriteToBytes());
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *std::move(file) : nullptr;
}

// One value of every type, scalars and arrays of each element type.
std::vector<std::pair<std::string, GgufValue>> EveryValueType() {
  return {
      {"u8", uint8_t{200}},
      {"i8", int8_t{-100}},
      {"u16", uint16_t{60000}},
      {"i16", int16_t{-30000}},
      {"u32", uint32_t{4000000000u}},
      {"i32", int32_t{-2000000000}},
      {"f32", 3.25f},
      {"bool.true", true},
      {"bool.false", false},
      {"str", std::string("hello, \0world", 13)},
      {"str.empty", std::string()},
      {"u64", uint64_t{18000000000000000000u}},
      {"i64", int64_t{-9000000000000000000}},
      {"f64", -1.0e300},
      {"a.u8", GgufArray(std::vector<uint8_t>{0, 1, 255})},
      {"a.i8", GgufArray(std::vector<int8_t>{-128, 0, 127})},
      {"a.u16", GgufArray(std::vector<uint16_t>{1, 65535})},
      {"a.i16", GgufArray(std::vector<int16_t>{-32768, 32767})},
      {"a.u32", GgufArray(std::vector<uint32_t>{7, 8, 9})},
      {"a.i32", GgufArray(std::vector<int32_t>{-1, 2, -3})},
      {"a.f32", GgufArray(std::vector<float>{0.5f, -2.0f, 1e30f})},
      {"a.bool", GgufArray(std::vector<bool>{true, false, true, true})},
      {"a.str", GgufArray(std::vector<std::string>{"<s>", "", "é", "</s>"})},
      {"a.u64", GgufArray(std::vector<uint64_t>{1, uint64_t{1} << 63})},
      {"a.i64", GgufArray(std::vector<int64_t>{-1, int64_t{1} << 62})},
      {"a.f64", GgufArray(std::vector<double>{0.1, -0.2})},
      {"a.empty", GgufArray(std::vector<float>{})},
      {"a.str.empty", GgufArray(std::vector<std::string>{})},
  };
}

TEST(GgufWriterTest, RoundTripsEveryValueType) {
  GgufWriter writer;
  const auto kvs = EveryValueType();
  for (const auto& [key, value] : kvs) {
    ASSERT_TRUE(writer.AddKv(key, value).ok()) << key;
  }
  std::unique_ptr<GgufFile> file = ReadBack(writer);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_TRUE(file->tensors().empty());
  ASSERT_EQ(file->kvs().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(file->kvs()[i].key, kvs[i].first);
    EXPECT_EQ(file->kvs()[i].value, kvs[i].second) << kvs[i].first;
    const GgufValue* found = file->Find(kvs[i].first);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(*found, kvs[i].second);
  }
  // Typed getters.
  EXPECT_EQ(*file->GetUint32("u32"), 4000000000u);
  EXPECT_EQ(*file->GetInt32("i32"), -2000000000);
  EXPECT_EQ(*file->GetUint64("u64"), uint64_t{18000000000000000000u});
  EXPECT_EQ(*file->GetFloat32("f32"), 3.25f);
  EXPECT_EQ(*file->GetBool("bool.true"), true);
  EXPECT_EQ(*file->GetString("str"), std::string("hello, \0world", 13));
  EXPECT_EQ(*file->Get<int16_t>("i16"), -30000);
  EXPECT_EQ(*file->Get<double>("f64"), -1.0e300);
  EXPECT_EQ(**file->GetArray<std::string>("a.str"),
            (std::vector<std::string>{"<s>", "", "é", "</s>"}));
  EXPECT_EQ(**file->GetArray<bool>("a.bool"),
            (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ((*file->GetArray<float>("a.empty"))->size(), 0u);
}

TEST(GgufWriterTest, GettersReportMissingKeysAndWrongTypes) {
  GgufWriter writer;
  ASSERT_TRUE(writer.AddKv("n", uint32_t{5}).ok());
  ASSERT_TRUE(writer.AddKv("a", GgufArray(std::vector<float>{1.0f})).ok());
  std::unique_ptr<GgufFile> file = ReadBack(writer);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->Find("missing"), nullptr);
  EXPECT_EQ(file->GetUint32("missing").status().code(),
            absl::StatusCode::kNotFound);
  absl::Status wrong = file->GetString("n").status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.message(), "[GGUF] key \"n\" is uint32, not string");
  EXPECT_EQ(file->GetInt32("n").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(file->GetArray<int32_t>("a").status().message(),
            "[GGUF] key \"a\" is an array of float32, not of int32");
  EXPECT_EQ(file->GetArray<float>("n").status().code(),
            absl::StatusCode::kInvalidArgument);
}

struct TensorCase {
  std::string name;
  int32_t ggml_type;
  std::vector<int64_t> ne;
};

TEST(GgufWriterTest, RoundTripsTensorsOfSeveralTypesAndAlignments) {
  const std::vector<TensorCase> cases = {
      {"f32", kGgmlF32, {5, 3}},         {"f16", kGgmlF16, {7}},
      {"bf16", kGgmlBF16, {2, 2, 2, 2}}, {"i32", kGgmlI32, {3}},
      {"q8_0", kGgmlQ8_0, {64, 2}},      {"q4_0", kGgmlQ4_0, {32, 1, 3}},
      {"q4_K", kGgmlQ4_K, {256, 2}},     {"q6_K", kGgmlQ6_K, {512}},
      {"scalar", kGgmlF32, {}},          {"empty", kGgmlF32, {0, 4}},
  };
  for (uint32_t alignment : {1u, 8u, 32u, 64u, 4096u}) {
    SCOPED_TRACE(alignment);
    GgufWriter writer;
    if (alignment != 32) {
      ASSERT_TRUE(writer.AddKv("general.alignment", alignment).ok());
    }
    std::vector<std::vector<uint8_t>> data;
    for (size_t i = 0; i < cases.size(); ++i) {
      const TensorCase& c = cases[i];
      data.push_back(RandomBytes(**GgmlNumBytes(c.ggml_type, c.ne), i));
      ASSERT_TRUE(writer.AddTensor(c.name, c.ggml_type, c.ne, data.back()).ok())
          << c.name;
    }
    // A type this library has no layout for: the bytes are kept as given.
    ASSERT_TRUE(
        writer.AddTensor("unknown", 23, {256}, RandomBytes(136, 99)).ok());
    std::unique_ptr<GgufFile> file = ReadBack(writer);
    ASSERT_NE(file, nullptr);
    EXPECT_EQ(file->alignment(), alignment);
    EXPECT_EQ(file->data_offset() % alignment, 0u);
    ASSERT_EQ(file->tensors().size(), cases.size() + 1);
    uint64_t expected_offset = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const TensorCase& c = cases[i];
      const GgufTensor& t = file->tensors()[i];
      EXPECT_EQ(t.name, c.name);
      EXPECT_EQ(t.ggml_type, c.ggml_type);
      EXPECT_EQ(t.n_dims, static_cast<int>(c.ne.size()));
      for (size_t d = 0; d < 4; ++d) {
        EXPECT_EQ(t.ne[d], d < c.ne.size() ? c.ne[d] : 1);
      }
      // ggml's layout: in order, each at the next multiple of the alignment.
      EXPECT_EQ(t.offset, expected_offset) << c.name;
      expected_offset +=
          (data[i].size() + alignment - 1) / alignment * alignment;
      ASSERT_EQ(t.num_bytes, data[i].size());
      EXPECT_EQ(std::vector<uint8_t>(t.data.begin(), t.data.end()), data[i]);
      EXPECT_EQ(&*file->FindTensor(c.name), &t);
      absl::StatusOr<Type> type = TesseraTypeFromGgml(c.ggml_type);
      EXPECT_EQ(t.type.has_value(), type.ok());
      if (type.ok()) {
        EXPECT_EQ(*t.type, *type);
      }
    }
    const GgufTensor& unknown = file->tensors().back();
    EXPECT_EQ(unknown.ggml_type, 23);
    EXPECT_EQ(unknown.num_bytes, std::nullopt);
    EXPECT_TRUE(unknown.data.empty());
    EXPECT_EQ(unknown.offset, expected_offset);
  }
}

TEST(GgufWriterTest, WritesVersion2) {
  GgufWriter writer(/*version=*/2);
  ASSERT_TRUE(writer.AddKv("general.name", std::string("v2")).ok());
  ASSERT_TRUE(writer.AddTensor("w", kGgmlF32, {2}, RandomBytes(8, 1)).ok());
  std::unique_ptr<GgufFile> file = ReadBack(writer);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(*file->GetString("general.name"), "v2");
  EXPECT_EQ(file->FindTensor("w")->data.size(), 8u);
}

TEST(GgufWriterTest, WritesFilesThatOpenMaps) {
  GgufWriter writer;
  ASSERT_TRUE(writer.AddKv("general.architecture", std::string("llama")).ok());
  const std::vector<uint8_t> weights = RandomBytes(34 * 4, 7);
  ASSERT_TRUE(writer.AddTensor("w", kGgmlQ8_0, {64, 2}, weights).ok());
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/model.gguf";
  ASSERT_TRUE(writer.WriteToFile(path).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->bytes(), absl::MakeConstSpan(writer.WriteToBytes()));
  EXPECT_EQ(*(*file)->GetString("general.architecture"), "llama");
  const GgufTensor* w = (*file)->FindTensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(*w->TesseraType(), Type::kQ8_0);
  EXPECT_EQ(std::vector<uint8_t>(w->data.begin(), w->data.end()), weights);
}

TEST(GgufWriterTest, WriteToFileReportsErrors) {
  GgufWriter writer;
  absl::Status status = writer.WriteToFile("/nonexistent/dir/x.gguf");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
}

TEST(GgufWriterTest, RefusesBadKvs) {
  GgufWriter writer;
  ASSERT_TRUE(writer.AddKv("k", int32_t{1}).ok());
  EXPECT_EQ(writer.AddKv("k", int32_t{2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.AddKv("", int32_t{2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(writer.AddKv("general.alignment", uint32_t{0}).ok());
  EXPECT_FALSE(writer.AddKv("general.alignment", uint32_t{3}).ok());
  EXPECT_FALSE(writer.AddKv("general.alignment", uint64_t{64}).ok());
  EXPECT_EQ(writer.alignment(), 32u);
  EXPECT_TRUE(writer.AddKv("general.alignment", uint32_t{16}).ok());
  EXPECT_EQ(writer.alignment(), 16u);
}

TEST(GgufWriterTest, RefusesBadTensors) {
  GgufWriter writer;
  const std::vector<uint8_t> bytes(16);
  ASSERT_TRUE(writer.AddTensor("t", kGgmlF32, {4}, bytes).ok());
  EXPECT_FALSE(writer.AddTensor("t", kGgmlF32, {4}, bytes).ok());
  EXPECT_FALSE(writer.AddTensor("", kGgmlF32, {4}, bytes).ok());
  EXPECT_FALSE(
      writer.AddTensor(std::string(64, 'x'), kGgmlF32, {4}, bytes).ok());
  EXPECT_FALSE(writer.AddTensor("u", kGgmlF32, {1, 1, 1, 1, 4}, bytes).ok());
  EXPECT_FALSE(writer.AddTensor("u", kGgmlF32, {5}, bytes).ok());
  EXPECT_FALSE(writer.AddTensor("u", kGgmlF32, {-4}, bytes).ok());
  EXPECT_FALSE(writer.AddTensor("u", kGgmlQ8_0, {16}, bytes).ok());
  EXPECT_FALSE(
      writer
          .AddTensor("u", kGgmlF32, {int64_t{1} << 40, int64_t{1} << 40}, bytes)
          .ok());
  EXPECT_TRUE(writer.AddTensor("u", kGgmlF16, {8}, bytes).ok());
}

}  // namespace
}  // namespace tessera
