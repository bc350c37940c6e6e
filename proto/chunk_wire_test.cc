#include "proto/chunk_wire.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/tessera.grpc.pb.h"

namespace tessera::wire {
namespace {

template <typename M>
grpc::ByteBuffer Serialize(const M& message) {
  grpc::ByteBuffer raw;
  bool own = false;
  EXPECT_TRUE(grpc::SerializationTraits<M>::Serialize(message, &raw, &own).ok());
  return raw;
}

// The message as gRPC would receive it in several slices: split at every
// `piece` bytes.
grpc::ByteBuffer Resliced(const grpc::ByteBuffer& message, size_t piece) {
  grpc::Slice whole;
  EXPECT_TRUE(message.DumpToSingleSlice(&whole).ok());
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < whole.size(); at += piece) {
    slices.emplace_back(whole.begin() + at, std::min(piece, whole.size() - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Gather(const Chunk& chunk) {
  std::string out(chunk.size(), '\0');
  EXPECT_TRUE(chunk
                  .ForEachSpan([&](size_t offset, const uint8_t* data,
                                   size_t n) {
                    EXPECT_LE(offset + n, out.size());
                    std::copy(data, data + n, out.begin() + offset);
                    return absl::OkStatus();
                  })
                  .ok());
  return out;
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + 3);
  return s;
}

TEST(ChunkWireTest, ChunkMessageParsesAsTheProtobufMessage) {
  for (size_t n : {0, 1, 127, 128, 300, 70000}) {
    const std::string data = Pattern(n);
    grpc::ByteBuffer raw = ChunkMessage(kReadTensorChunkField,
                                        grpc::Slice(data.data(), data.size()));
    v1::ReadTensorResponse response;
    ASSERT_TRUE(grpc::SerializationTraits<v1::ReadTensorResponse>::Deserialize(
                    &raw, &response)
                    .ok());
    EXPECT_EQ(response.chunk(), data) << n;
  }
}

TEST(ChunkWireTest, FindsAProtobufChunkAcrossSlices) {
  const std::string data = Pattern(5000);
  v1::WriteTensorRequest request;
  request.set_chunk(data);
  for (size_t piece : {1, 2, 3, 7, 4096, 1 << 20}) {
    absl::StatusOr<std::optional<Chunk>> chunk =
        FindChunk(Resliced(Serialize(request), piece), kWriteTensorChunkField);
    ASSERT_TRUE(chunk.ok());
    ASSERT_TRUE(chunk->has_value()) << piece;
    EXPECT_EQ((*chunk)->size(), data.size());
    EXPECT_EQ(Gather(**chunk), data) << piece;
  }
}

TEST(ChunkWireTest, RoundTripsItsOwnMessages) {
  const std::string data = Pattern(1 << 16);
  absl::StatusOr<std::optional<Chunk>> chunk =
      FindChunk(ChunkMessage(kWriteTensorChunkField,
                             grpc::Slice(data.data(), data.size())),
                kWriteTensorChunkField);
  ASSERT_TRUE(chunk.ok() && chunk->has_value());
  EXPECT_EQ(Gather(**chunk), data);
}

TEST(ChunkWireTest, OtherMessagesAreNotChunks) {
  v1::WriteTensorRequest header;
  header.mutable_header()->set_session("s");
  header.mutable_header()->set_size(10);
  v1::ReadTensorResponse empty;
  v1::WriteTensorRequest chunk;
  chunk.set_chunk("abc");
  grpc::Slice whole;
  ASSERT_TRUE(Serialize(chunk).DumpToSingleSlice(&whole).ok());
  const std::string bytes(reinterpret_cast<const char*>(whole.begin()),
                          whole.size());
  // The chunk followed by another field, and cut short by one byte.
  const std::string trailing = bytes + std::string("\x08\x01", 2);
  const std::string truncated = bytes.substr(0, bytes.size() - 1);
  const std::string bad_varint(12, '\xff');
  struct Case {
    const char* name;
    grpc::ByteBuffer raw;
    uint32_t field;
  };
  auto raw = [](const std::string& s) {
    grpc::Slice slice(s.data(), s.size());
    return grpc::ByteBuffer(&slice, 1);
  };
  const Case cases[] = {
      {"header", Serialize(header), kWriteTensorChunkField},
      {"empty message", Serialize(empty), kReadTensorChunkField},
      {"another field number", Serialize(chunk), kReadTensorChunkField},
      {"a field after the chunk", raw(trailing), kWriteTensorChunkField},
      {"truncated", raw(truncated), kWriteTensorChunkField},
      {"overlong varint", raw(bad_varint), kWriteTensorChunkField},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::optional<Chunk>> found = FindChunk(c.raw, c.field);
    ASSERT_TRUE(found.ok()) << c.name;
    EXPECT_FALSE(found->has_value()) << c.name;
  }
}

}  // namespace
}  // namespace tessera::wire
