#ifndef TESSERA_PROTO_CHUNK_WIRE_H_
#define TESSERA_PROTO_CHUNK_WIRE_H_

// Tensor chunks on the wire without copies through protobuf strings.
//
// A WriteTensorRequest carrying only its `chunk` (field 2) and a
// ReadTensorResponse (field 1) are, in protobuf's wire format, a tag byte, a
// varint length and the bytes. ChunkMessage builds that message as a
// grpc::ByteBuffer whose data slice is the caller's memory; FindChunk finds
// the bytes of a received message in the slices gRPC read them into, so they
// can be copied once, straight to their destination. Any other encoding of
// the same message (a header, unknown fields, a chunk field repeated) is not
// a plain chunk and is left to the protobuf parser.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace tessera::wire {

// The chunk size the streams send (when the daemon's max_chunk_bytes
// allows it). A message must fit well inside the peer's HTTP/2 stream
// window, which gRPC starts near 4 MiB: a 4 MiB chunk plus framing would
// overflow it and wait for a window update with every message.
inline constexpr uint64_t kStreamChunkBytes = uint64_t{1} << 20;

// The chunk size a stream sends under a peer limit of `max_chunk_bytes`.
inline uint64_t StreamChunkBytes(uint64_t max_chunk_bytes) {
  return std::clamp<uint64_t>(max_chunk_bytes, 1, kStreamChunkBytes);
}

// Field numbers of the chunk in WriteTensorRequest and ReadTensorResponse.
inline constexpr uint32_t kWriteTensorChunkField = 2;
inline constexpr uint32_t kReadTensorChunkField = 1;

// The message {field: data}; `data` is referenced, not copied.
grpc::ByteBuffer ChunkMessage(uint32_t field, grpc::Slice data);

// The bytes of a plain chunk message, as spans of the received slices.
class Chunk {
 public:
  size_t size() const { return size_; }
  // Calls `sink(offset in the chunk, data, n)` for each contiguous span, in
  // order, and stops at the first error.
  absl::Status ForEachSpan(
      const std::function<absl::Status(size_t, const uint8_t*, size_t)>& sink)
      const;

 private:
  friend absl::StatusOr<std::optional<Chunk>> FindChunk(
      const grpc::ByteBuffer& message, uint32_t field);
  std::vector<grpc::Slice> slices_;
  size_t start_ = 0;  // offset of the first data byte in the slices
  size_t size_ = 0;
};

// The chunk when `message` is exactly {field: bytes}; nullopt when it is
// any other message.
absl::StatusOr<std::optional<Chunk>> FindChunk(const grpc::ByteBuffer& message,
                                               uint32_t field);

}  // namespace tessera::wire

#endif  // TESSERA_PROTO_CHUNK_WIRE_H_
