#include "server/operations/metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::server {
namespace {

// A label value as the text format writes it: backslash, double quote and
// line feed escaped.
std::string LabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace

absl::string_view StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    default: return "UNKNOWN";
  }
}

void Metrics::Histogram::Observe(double seconds) {
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++counts[i];
  }
  ++count;
  sum += seconds;
}

void Metrics::Histogram::Render(absl::string_view name,
                                absl::string_view labels,
                                std::string& out) const {
  const std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    absl::StrAppendFormat(&out, "%s_bucket{%s%sle=\"%g\"} %d\n", name, labels,
                          sep, kBuckets[i], counts[i]);
  }
  absl::StrAppendFormat(&out, "%s_bucket{%s%sle=\"+Inf\"} %d\n", name, labels,
                        sep, count);
  const std::string braces =
      labels.empty() ? "" : absl::StrCat("{", labels, "}");
  absl::StrAppendFormat(&out, "%s_sum%s %.9g\n%s_count%s %d\n", name, braces,
                        sum, name, braces, count);
}

Metrics::Metrics(absl::flat_hash_set<std::string> methods)
    : methods_(std::move(methods)) {}

void Metrics::ObserveCall(absl::string_view method, grpc::StatusCode code,
                          absl::Duration duration) {
  const absl::string_view label =
      methods_.contains(method) ? method : kOtherMethod;
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(label);
  if (it == calls_.end()) it = calls_.emplace(label, MethodCalls()).first;
  ++it->second.by_code[code];
  it->second.latency.Observe(absl::ToDoubleSeconds(duration));
}

void Metrics::ObserveExecution(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  executions_.Observe(absl::ToDoubleSeconds(duration));
}

void Metrics::AddReceived(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  received_ += bytes;
}

void Metrics::AddSent(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  sent_ += bytes;
}

uint64_t Metrics::received() const {
  absl::MutexLock lock(&mu_);
  return received_;
}

std::string Metrics::Render(const Gauges& gauges) const {
  std::string out;
  absl::MutexLock lock(&mu_);
  out +=
      "# HELP tessera_rpcs_total Finished gRPC calls by method and status "
      "code.\n# TYPE tessera_rpcs_total counter\n";
  for (const auto& [method, calls] : calls_) {
    for (const auto& [code, n] : calls.by_code) {
      absl::StrAppendFormat(
          &out, "tessera_rpcs_total{method=\"%s\",code=\"%s\"} %d\n",
          LabelValue(method), StatusCodeName(code), n);
    }
  }
  out +=
      "# HELP tessera_rpc_duration_seconds gRPC call latency by method.\n"
      "# TYPE tessera_rpc_duration_seconds histogram\n";
  for (const auto& [method, calls] : calls_) {
    calls.latency.Render("tessera_rpc_duration_seconds",
                         absl::StrCat("method=\"", LabelValue(method), "\""),
                         out);
  }
  out +=
      "# HELP tessera_graph_execution_seconds Latency of graph executions "
      "(Compute and Execute).\n"
      "# TYPE tessera_graph_execution_seconds histogram\n";
  executions_.Render("tessera_graph_execution_seconds", "", out);
  absl::StrAppendFormat(
      &out,
      "# HELP tessera_received_bytes_total Tensor bytes received from "
      "clients.\n# TYPE tessera_received_bytes_total counter\n"
      "tessera_received_bytes_total %d\n"
      "# HELP tessera_sent_bytes_total Tensor bytes sent to clients.\n"
      "# TYPE tessera_sent_bytes_total counter\n"
      "tessera_sent_bytes_total %d\n"
      "# HELP tessera_sessions Open sessions.\n# TYPE tessera_sessions gauge\n"
      "tessera_sessions %d\n"
      "# HELP tessera_work_in_flight Calls and streams at work (a drain "
      "waits for them).\n# TYPE tessera_work_in_flight gauge\n"
      "tessera_work_in_flight %d\n",
      received_, sent_, gauges.sessions, gauges.work_in_flight);
  out +=
      "# HELP tessera_device_memory_used_bytes Device memory in use.\n"
      "# TYPE tessera_device_memory_used_bytes gauge\n";
  for (const DeviceMemory& d : gauges.devices) {
    absl::StrAppendFormat(
        &out, "tessera_device_memory_used_bytes{device=\"%s\"} %d\n",
        LabelValue(d.device), d.used);
  }
  out +=
      "# HELP tessera_device_memory_total_bytes Device memory in all.\n"
      "# TYPE tessera_device_memory_total_bytes gauge\n";
  for (const DeviceMemory& d : gauges.devices) {
    absl::StrAppendFormat(
        &out, "tessera_device_memory_total_bytes{device=\"%s\"} %d\n",
        LabelValue(d.device), d.total);
  }
  return out;
}

}  // namespace tessera::server
