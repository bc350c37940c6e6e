#include "client/bearer_token.h"

#include <utility>

namespace tessera::client {
namespace {

using grpc::experimental::InterceptionHookPoints;

class Interceptor final : public grpc::experimental::Interceptor {
 public:
  explicit Interceptor(const std::string& header) : header_(header) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", header_);
    }
    methods->Proceed();
  }

 private:
  const std::string& header_;
};

class Factory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit Factory(std::string token) : header_("Bearer " + std::move(token)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new Interceptor(header_);
  }

 private:
  const std::string header_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
BearerTokenInterceptor(std::string token) {
  return std::make_unique<Factory>(std::move(token));
}

}  // namespace tessera::client
