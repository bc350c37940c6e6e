#ifndef TESSERA_SERVER_TENSOR_STREAMS_H_
#define TESSERA_SERVER_TENSOR_STREAMS_H_

// The streaming tensor RPCs as gRPC callback reactors.

#include "grpcpp/support/server_callback.h"
#include "proto/tessera.grpc.pb.h"
#include "server/config.h"
#include "server/session_manager.h"

namespace tessera::server {

// WriteTensor: the first message must be a header naming the session and a
// range of one of its buffers; each later chunk (at most
// limits.max_chunk_bytes) is written with Buffer::Write straight after the
// previous one. The stream ends OK when the chunks added up to exactly the
// header's size; INVALID_ARGUMENT for a chunk first, a second header, a
// chunk too large, more bytes than announced, or a stream that ends short.
// Deletes itself when done.
grpc::ServerReadReactor<v1::WriteTensorRequest>* NewWriteTensorReactor(
    SessionManager& sessions, const Limits& limits,
    v1::WriteTensorResponse* response);

// ReadTensor: streams the range in chunks of at most
// limits.max_chunk_bytes. Deletes itself when done.
grpc::ServerWriteReactor<v1::ReadTensorResponse>* NewReadTensorReactor(
    SessionManager& sessions, const Limits& limits,
    const v1::ReadTensorRequest* request);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_TENSOR_STREAMS_H_
