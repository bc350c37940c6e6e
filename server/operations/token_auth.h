#ifndef TESSERA_SERVER_OPERATIONS_TOKEN_AUTH_H_
#define TESSERA_SERVER_OPERATIONS_TOKEN_AUTH_H_

// Bearer-token authentication: every call must carry the metadata
// "authorization: Bearer <token>". Works with and without TLS.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/server_context.h"

namespace tessera::server {

class TokenAuth {
 public:
  // Accepts every call.
  TokenAuth() = default;
  // Reads the token from the first line of `path` (surrounding blanks
  // dropped). Errors: NOT_FOUND when the file cannot be read;
  // INVALID_ARGUMENT when it holds no token.
  static absl::StatusOr<TokenAuth> FromFile(const std::string& path);
  explicit TokenAuth(std::string token) : token_(std::move(token)) {}

  bool enabled() const { return !token_.empty(); }

  // OK when authentication is off or the call carries the token; otherwise
  // UNAUTHENTICATED saying whether the token was missing or wrong. The
  // comparison takes the same time wherever the tokens differ.
  absl::Status Check(const grpc::ServerContextBase& context) const;

 private:
  std::string token_;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_TOKEN_AUTH_H_
