#ifndef TESSERA_SERVER_RPC_TENSOR_STREAMS_H_
#define TESSERA_SERVER_RPC_TENSOR_STREAMS_H_

// The streaming tensor RPCs as gRPC callback reactors over raw messages
// (proto/chunk_wire.h), so chunk bytes are not copied through protobuf
// strings on their way between the socket and a buffer.

#include "grpcpp/support/server_callback.h"
#include "proto/tessera.grpc.pb.h"
#include "server/operations/config.h"
#include "server/sessions/content_store.h"
#include "server/rpc/in_flight.h"
#include "server/operations/metrics.h"
#include "server/sessions/session_manager.h"

namespace tessera::server {

// What the streams work with; must outlive them.
struct TensorStreamContext {
  SessionManager& sessions;
  const Limits& limits;
  Metrics& metrics;
  ContentStore& store;
  // Each stream counts here while it is open.
  InFlight& in_flight;
};

// WriteTensor: the first message must be a header naming the session and a
// range of one of its buffers; each later chunk (at most
// limits.max_chunk_bytes) is written with Buffer::Write straight after the
// previous one. The stream ends OK when the chunks added up to exactly the
// header's size; INVALID_ARGUMENT for a chunk first, a second header, a
// chunk too large, more bytes than announced, or a stream that ends short.
// A header with a content hash (for at least ContentStore::kMinBytes): once
// the stream is complete, the range is read back, hashed and kept in the
// store (nothing is copied while the stream is open; the copy is charged to
// the session while it is made, and skipped when the session cannot afford
// it); DATA_LOSS when the bytes do not match the hash. Staging for device
// buffers (one chunk) is charged to the session too. Bytes count into the
// metrics.
// Deletes itself when done.
grpc::ServerReadReactor<grpc::ByteBuffer>* NewWriteTensorReactor(
    const TensorStreamContext& context, grpc::ByteBuffer* response);

// ReadTensor: streams the range in chunks of wire::kStreamChunkBytes, or
// limits.max_chunk_bytes when smaller. Deletes itself when done.
grpc::ServerWriteReactor<grpc::ByteBuffer>* NewReadTensorReactor(
    const TensorStreamContext& context, const grpc::ByteBuffer* request);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_TENSOR_STREAMS_H_
