#ifndef TESSERA_SERVER_OPERATIONS_DAEMON_H_
#define TESSERA_SERVER_OPERATIONS_DAEMON_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backend/registry.h"
#include "grpcpp/grpcpp.h"
#include "server/ggml_rpc/listener.h"
#include "server/operations/call_tracker.h"
#include "server/operations/config.h"
#include "server/sessions/content_store.h"
#include "server/sessions/memory_account.h"
#include "server/rpc/in_flight.h"
#include "server/operations/metrics.h"
#include "server/operations/metrics_http.h"
#include "server/rpc/service.h"
#include "server/sessions/session_manager.h"
#include "server/operations/token_auth.h"
#include "server/rpc/work_queue.h"

namespace tessera::server {

// A running tessera service: the devices of `config.devices`, the sessions,
// the compute workers and a gRPC server listening on `config.listen`. Used
// by tesserad and by benchmarks that serve in-process.
class Daemon {
 public:
  // Starts listening, then opens the devices; health is NOT_SERVING and
  // Hello UNAVAILABLE until they are open. Errors: INVALID_ARGUMENT for a
  // bad device spec or TLS files that do not go together; NOT_FOUND when it
  // names no device or a file cannot be read; FAILED_PRECONDITION for an
  // address beyond loopback without TLS, token or --insecure; UNAVAILABLE
  // when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const Config& config);
  // Shuts down (see Shutdown).
  ~Daemon();

  // The bound port (useful with a listen port of 0).
  int port() const { return port_; }
  // The ggml-rpc listener's bound port; 0 when it is off.
  int ggml_rpc_port() const {
    return ggml_rpc_ == nullptr ? 0 : ggml_rpc_->port();
  }
  Metrics& metrics() { return metrics_; }
  // Refuses new calls, gives calls in flight up to `grace`, then frees every
  // session. ggml-rpc connections are closed at once (the drain before
  // has let their commands in flight finish).
  void Shutdown(absl::Duration grace);
  // A graceful stop: health turns NOT_SERVING, new sessions are refused,
  // the work in flight (server/rpc/in_flight.h) gets up to `timeout` to
  // finish, then Shutdown.
  void Drain(absl::Duration timeout);

 private:
  Daemon(const Config& config, int threads);
  Metrics::Gauges Gauges() const;

  const Limits limits_;
  Registry registry_;
  TokenAuth auth_;
  Metrics metrics_;
  CallTracker calls_;
  InFlight in_flight_;
  // The daemon-wide memory budget every session's account (and the content
  // store's memory) is under: the devices' memory, set once they are open.
  const std::shared_ptr<MemoryAccount> budget_;
  ContentStore store_;
  SessionManager sessions_;
  WorkQueue work_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttp> metrics_http_;
  // Declared after what its connections use, so destroyed first.
  std::unique_ptr<ggml_rpc::Listener> ggml_rpc_;
  int port_ = 0;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_DAEMON_H_
