#ifndef TESSERA_SERVER_CALL_TRACKER_H_
#define TESSERA_SERVER_CALL_TRACKER_H_

// Watches every call the server takes, through a gRPC server interceptor:
// counts the calls in flight (so a drain can wait for them) and reports
// each finished call's method, status code and duration to an observer
// (the metrics).

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"

namespace tessera::server {

class CallTracker {
 public:
  // Called once per finished call, on a gRPC thread.
  using Observer = std::function<void(absl::string_view method,
                                      grpc::StatusCode code,
                                      absl::Duration duration)>;

  explicit CallTracker(Observer observer = nullptr)
      : observer_(std::move(observer)) {}

  // For ServerBuilder::experimental().SetInterceptorCreators. The tracker
  // must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewInterceptorFactory();

  // Calls in flight, not counting the streams that last as long as a
  // session or a watcher does (Attach, health Watch, reflection).
  size_t in_flight() const;
  // Waits until no counted call is in flight or `deadline` passes; returns
  // whether none is.
  bool AwaitIdle(absl::Time deadline);

  // Whether `method` (e.g. "/tessera.v1.Tessera/Attach") is such a stream.
  static bool IsLongLived(absl::string_view method);

 private:
  class Interceptor;
  class Factory;
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_ == 0;
  }
  void Begin();
  void End(absl::string_view method, grpc::StatusCode code,
           absl::Duration duration, bool counted);

  const Observer observer_;
  mutable absl::Mutex mu_;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_CALL_TRACKER_H_
