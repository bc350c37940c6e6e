#ifndef TESSERA_CLIENT_BEARER_TOKEN_H_
#define TESSERA_CLIENT_BEARER_TOKEN_H_

// Adds "authorization: Bearer <token>" to every call of a channel, with or
// without TLS (gRPC's own call credentials need TLS).

#include <memory>
#include <string>

#include "grpcpp/support/client_interceptor.h"

namespace tessera::client {

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
BearerTokenInterceptor(std::string token);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_BEARER_TOKEN_H_
