#ifndef TESSERA_PROTO_RAW_MESSAGE_H_
#define TESSERA_PROTO_RAW_MESSAGE_H_

// tessera.v1 messages as the raw grpc::ByteBuffers that the byte streams
// (WriteTensor, ReadTensor: proto/chunk_wire.h) send besides their chunks.

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/byte_buffer.h"

namespace tessera::wire {

// Serializes `message` into `raw`. Errors: INTERNAL "WHAT the message does
// not serialize: ..." when protobuf cannot serialize it.
template <typename M>
absl::Status SerializeRaw(const M& message, absl::string_view what,
                          grpc::ByteBuffer& raw) {
  bool own_buffer = false;
  const grpc::Status status =
      grpc::SerializationTraits<M>::Serialize(message, &raw, &own_buffer);
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      what, " the message does not serialize: ", status.error_message()));
}

// Parses all of `raw` into `message`; false when it does not parse.
template <typename M>
bool ParseRaw(const grpc::ByteBuffer& raw, M& message) {
  grpc::ByteBuffer copy = raw;  // references the same slices
  return grpc::SerializationTraits<M>::Deserialize(&copy, &message).ok();
}

}  // namespace tessera::wire

#endif  // TESSERA_PROTO_RAW_MESSAGE_H_
