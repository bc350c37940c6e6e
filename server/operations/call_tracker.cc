#include "server/operations/call_tracker.h"

#include <optional>

#include "absl/time/clock.h"

namespace tessera::server {

using grpc::experimental::InterceptionHookPoints;

// One per call: created when the call arrives, destroyed when it ends.
class CallTracker::Interceptor final : public grpc::experimental::Interceptor {
 public:
  Interceptor(CallTracker& tracker, std::string method)
      : tracker_(tracker),
        method_(std::move(method)),
        start_(absl::Now()) {}

  ~Interceptor() override {
    // A call that ended without sending a status was cancelled.
    tracker_.End(method_, code_.value_or(grpc::StatusCode::CANCELLED),
                 absl::Now() - start_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      code_ = methods->GetSendStatus().error_code();
    }
    methods->Proceed();
  }

 private:
  CallTracker& tracker_;
  const std::string method_;
  const absl::Time start_;
  std::optional<grpc::StatusCode> code_;
};

class CallTracker::Factory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(CallTracker& tracker) : tracker_(tracker) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new Interceptor(tracker_, info->method());
  }

 private:
  CallTracker& tracker_;
};

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
CallTracker::NewInterceptorFactory() {
  return std::make_unique<Factory>(*this);
}

void CallTracker::End(absl::string_view method, grpc::StatusCode code,
                      absl::Duration duration) {
  if (observer_) observer_(method, code, duration);
}

}  // namespace tessera::server
