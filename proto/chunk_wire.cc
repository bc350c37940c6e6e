#include "proto/chunk_wire.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"

namespace tessera::wire {
namespace {

constexpr uint32_t kLengthDelimited = 2;

// Appends `value` as a protobuf varint.
size_t PutVarint(uint64_t value, uint8_t* out) {
  size_t n = 0;
  while (value >= 0x80) {
    out[n++] = static_cast<uint8_t>(value | 0x80);
    value >>= 7;
  }
  out[n++] = static_cast<uint8_t>(value);
  return n;
}

// Reads bytes in order across a list of slices.
class SliceCursor {
 public:
  explicit SliceCursor(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {}

  // The next byte, or nullopt at the end.
  std::optional<uint8_t> Next() {
    while (index_ < slices_.size() && at_ == slices_[index_].size()) {
      ++index_;
      at_ = 0;
    }
    if (index_ == slices_.size()) return std::nullopt;
    ++consumed_;
    return slices_[index_].begin()[at_++];
  }

  // A varint of at most 10 bytes, or nullopt when malformed or cut short.
  std::optional<uint64_t> Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      std::optional<uint8_t> byte = Next();
      if (!byte) return std::nullopt;
      value |= static_cast<uint64_t>(*byte & 0x7f) << shift;
      if ((*byte & 0x80) == 0) return value;
    }
    return std::nullopt;
  }

  size_t consumed() const { return consumed_; }

 private:
  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t at_ = 0;
  size_t consumed_ = 0;
};

}  // namespace

grpc::ByteBuffer ChunkMessage(uint32_t field, grpc::Slice data) {
  std::array<uint8_t, 20> prefix;
  size_t n = PutVarint((field << 3) | kLengthDelimited, prefix.data());
  n += PutVarint(data.size(), prefix.data() + n);
  const grpc::Slice slices[2] = {grpc::Slice(prefix.data(), n),
                                 std::move(data)};
  return grpc::ByteBuffer(slices, 2);
}

absl::StatusOr<std::optional<Chunk>> FindChunk(const grpc::ByteBuffer& message,
                                               uint32_t field) {
  Chunk chunk;
  grpc::Status dumped = message.Dump(&chunk.slices_);
  if (!dumped.ok()) {
    return absl::InternalError(
        absl::StrCat("reading a message: ", dumped.error_message()));
  }
  SliceCursor cursor(chunk.slices_);
  const std::optional<uint64_t> tag = cursor.Varint();
  if (!tag || *tag != ((field << 3) | kLengthDelimited)) return std::nullopt;
  const std::optional<uint64_t> length = cursor.Varint();
  if (!length || *length != message.Length() - cursor.consumed()) {
    return std::nullopt;
  }
  chunk.start_ = cursor.consumed();
  chunk.size_ = *length;
  return chunk;
}

absl::Status Chunk::ForEachSpan(
    const std::function<absl::Status(size_t, const uint8_t*, size_t)>& sink)
    const {
  size_t skip = start_;
  size_t done = 0;
  for (const grpc::Slice& slice : slices_) {
    if (skip >= slice.size()) {
      skip -= slice.size();
      continue;
    }
    const size_t n = slice.size() - skip;
    if (absl::Status s = sink(done, slice.begin() + skip, n); !s.ok()) {
      return s;
    }
    done += n;
    skip = 0;
  }
  return absl::OkStatus();
}

}  // namespace tessera::wire
