#ifndef TESSERA_SERVER_OPERATIONS_METRICS_H_
#define TESSERA_SERVER_OPERATIONS_METRICS_H_

// The daemon's counters and histograms, rendered in the Prometheus text
// exposition format (version 0.0.4) for GET /metrics.
//
// Label values are escaped as the format requires (\\, \" and \n). A call
// of a method the daemon does not serve counts under method="other", so
// clients cannot add series.
//
//   tessera_rpcs_total{method,code}             finished calls
//   tessera_rpc_duration_seconds{method}        call latency histogram
//   tessera_graph_execution_seconds             compute/execute latency
//   tessera_received_bytes_total                tensor bytes from clients
//   tessera_sent_bytes_total                    tensor bytes to clients
//   tessera_sessions                            open sessions
//   tessera_work_in_flight                      calls and streams at work
//   tessera_device_memory_used_bytes{device}    and ..._total_bytes
//
// Thread-safe.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/status_code_enum.h"

namespace tessera::server {

class Metrics {
 public:
  // `methods`: the full names ("/package.Service/Method") the server serves.
  explicit Metrics(absl::flat_hash_set<std::string> methods);
  // The label of calls to any other method.
  static constexpr absl::string_view kOtherMethod = "other";

  // Values read when /metrics is asked for.
  struct DeviceMemory {
    std::string device;
    uint64_t used = 0;
    uint64_t total = 0;
  };
  struct Gauges {
    size_t sessions = 0;
    // Offloaded calls and busy streams (server/rpc/in_flight.h).
    size_t work_in_flight = 0;
    std::vector<DeviceMemory> devices;
  };

  void ObserveCall(absl::string_view method, grpc::StatusCode code,
                   absl::Duration duration);
  void ObserveExecution(absl::Duration duration);
  void AddReceived(uint64_t bytes);
  void AddSent(uint64_t bytes);

  uint64_t received() const;
  std::string Render(const Gauges& gauges) const;

 private:
  // Upper bounds of the latency buckets, in seconds.
  static constexpr std::array<double, 14> kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,  0.05,    0.1,    0.25,  1,      5,     30};
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> counts{};
    uint64_t count = 0;
    double sum = 0;
    void Observe(double seconds);
    void Render(absl::string_view name, absl::string_view labels,
                std::string& out) const;
  };

  // Constant after construction.
  const absl::flat_hash_set<std::string> methods_;

  // A method's finished calls by status code, and their latency.
  struct MethodCalls {
    std::map<grpc::StatusCode, uint64_t> by_code;
    Histogram latency;
  };

  mutable absl::Mutex mu_;
  // By label (a method, or kOtherMethod); looked up by string_view, so a
  // call's observation makes no string.
  std::map<std::string, MethodCalls, std::less<>> calls_ ABSL_GUARDED_BY(mu_);
  Histogram executions_ ABSL_GUARDED_BY(mu_);
  uint64_t received_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
};

// The canonical name of a gRPC status code, e.g. "NOT_FOUND".
absl::string_view StatusCodeName(grpc::StatusCode code);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_METRICS_H_
