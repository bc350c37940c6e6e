#ifndef TESSERA_CLIENT_RAW_STREAM_CALL_H_
#define TESSERA_CLIENT_RAW_STREAM_CALL_H_

// One streaming call with raw messages (grpc::ByteBuffer), so tensor chunks
// travel between the caller's memory and the socket without protobuf copies
// (proto/chunk_wire.h). Works for client-, server- and bidirectional
// streaming methods alike.

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace tessera::client {

struct RawStreamHandlers {
  // The next message to send, or nullopt when there are no more.
  std::function<std::optional<grpc::ByteBuffer>()> next_write;
  // Takes each message received, in order; an error cancels the call and is
  // what RunRawStreamCall returns.
  std::function<absl::Status(const grpc::ByteBuffer&)> on_read;
};

// Runs `method` (e.g. "/tessera.v1.Tessera/WriteTensor") on `channel` and
// blocks until it ends, returning the call's status.
absl::Status RunRawStreamCall(grpc::Channel& channel, const std::string& method,
                              const RawStreamHandlers& handlers);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_RAW_STREAM_CALL_H_
