#ifndef TESSERA_SERVER_OPERATIONS_TRANSPORT_SECURITY_H_
#define TESSERA_SERVER_OPERATIONS_TRANSPORT_SECURITY_H_

// How tesserad listens: TLS or plaintext, and whether it may listen where
// it was asked to.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/operations/config.h"

namespace tessera::server {

// TLS with the PEM files of `security` (with a client CA, clients must
// present a certificate that chains to it), or plaintext without TLS.
// Errors: NOT_FOUND for a file that cannot be read; INVALID_ARGUMENT for a
// certificate without a key or the reverse.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenCredentials(
    const Security& security);

// Whether HOST:PORT names a loopback host (127.0.0.0/8, ::1, localhost) or
// the address is a Unix domain socket (unix:PATH).
bool IsLoopback(const std::string& listen);

// FAILED_PRECONDITION, saying why and what to give, when `listen` reaches
// beyond loopback with neither TLS nor a token and `security.insecure` is
// not set.
absl::Status CheckExposure(const std::string& listen,
                           const Security& security);

// FAILED_PRECONDITION when `listen` (a protocol with no authentication,
// such as ggml-rpc) reaches beyond loopback and `security.insecure` is not
// set: TLS and tokens do not protect it.
absl::Status CheckUnauthenticatedExposure(const std::string& listen,
                                          const Security& security);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_TRANSPORT_SECURITY_H_
