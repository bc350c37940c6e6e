#include "server/rpc/grpc_status.h"

#include <cstddef>
#include <string>

#include "server/decoding/client_text.h"

namespace tessera::server {
namespace {

// Messages may quote client text; what goes back fits any trailer.
constexpr size_t kMaxMessageBytes = 4096;

}  // namespace


grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      ClientText(status.message(), kMaxMessageBytes));
}

}  // namespace tessera::server
