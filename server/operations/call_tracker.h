#ifndef TESSERA_SERVER_OPERATIONS_CALL_TRACKER_H_
#define TESSERA_SERVER_OPERATIONS_CALL_TRACKER_H_

// Watches every call the server takes, through a gRPC server interceptor,
// and reports each finished call's method, status code and duration to an
// observer (the metrics).

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
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

 private:
  class Interceptor;
  class Factory;
  void End(absl::string_view method, grpc::StatusCode code,
           absl::Duration duration);

  const Observer observer_;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_CALL_TRACKER_H_
