#ifndef TESSERA_SERVER_RPC_GRPC_STATUS_H_
#define TESSERA_SERVER_RPC_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tessera::server {

// The one conversion of the daemon's statuses to the wire: same code (the
// numeric values agree), same message made safe by ClientText
// (server/decoding/client_text.h): control characters escaped, at most
// 4 KiB of it kept.
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_GRPC_STATUS_H_
