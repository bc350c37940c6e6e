#include "server/call_tracker.h"

#include <optional>

namespace tessera::server {

using grpc::experimental::InterceptionHookPoints;

// One per call: created when the call arrives, destroyed when it ends.
class CallTracker::Interceptor final : public grpc::experimental::Interceptor {
 public:
  Interceptor(CallTracker& tracker, std::string method)
      : tracker_(tracker),
        method_(std::move(method)),
        counted_(!IsLongLived(method_)),
        start_(absl::Now()) {
    if (counted_) tracker_.Begin();
  }

  ~Interceptor() override {
    // A call that ended without sending a status was cancelled.
    tracker_.End(method_, code_.value_or(grpc::StatusCode::CANCELLED),
                 absl::Now() - start_, counted_);
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
  const bool counted_;
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

bool CallTracker::IsLongLived(absl::string_view method) {
  return method == "/tessera.v1.Tessera/Attach" ||
         method == "/grpc.health.v1.Health/Watch" ||
         method ==
             "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
}

size_t CallTracker::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

bool CallTracker::AwaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(this, &CallTracker::Idle),
                               deadline);
}

void CallTracker::Begin() {
  absl::MutexLock lock(&mu_);
  ++in_flight_;
}

void CallTracker::End(absl::string_view method, grpc::StatusCode code,
                      absl::Duration duration, bool counted) {
  if (observer_) observer_(method, code, duration);
  if (!counted) return;
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

}  // namespace tessera::server
