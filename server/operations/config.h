#ifndef TESSERA_SERVER_OPERATIONS_CONFIG_H_
#define TESSERA_SERVER_OPERATIONS_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::server {

// Limits the daemon enforces and announces in HelloResponse.limits.
struct Limits {
  // Largest WriteTensor/ReadTensor chunk and largest inline tensor.
  size_t max_chunk_bytes = size_t{4} << 20;
  // Most tensors (nodes + leafs) of one graph.
  uint32_t max_graph_nodes = 8192;
  // Largest gRPC message the daemon receives or sends.
  size_t max_message_bytes = size_t{64} << 20;
  // Most open sessions at once.
  size_t max_sessions = 1024;
  // Most executions one Execute stream holds (read, response not yet
  // written) before it stops reading; a message (up to 64 executions) is
  // read whole.
  size_t max_queued_executions = 64;
  // Most Execute streams open at once.
  size_t max_execute_streams = 4096;
  // Most memory one session may cause (buffers while they live, graphs'
  // compute memory, upload staging, unsent responses); 0: no quota.
  uint64_t session_memory_quota = 0;
  // Device memory that buffer allocations must leave free on every device.
  uint64_t device_memory_reserve = 0;
};

// Transport security. With neither TLS nor a token the daemon listens only
// on loopback unless `insecure` is set.
struct Security {
  // PEM files: the server's certificate chain and key; with a client CA,
  // clients must present a certificate it signed (mutual TLS).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // A file whose first line is the bearer token every call must carry.
  std::string token_file;
  bool insecure = false;

  bool tls() const { return !tls_cert.empty(); }
};

// Everything tesserad is configured with.
struct Config {
  std::string listen = "127.0.0.1:50051";
  // backend/assembly/device_spec.h AddDevices spec; "all" is every local device.
  std::string devices = "all";
  // Threads each CPU stream computes with; 0 means one per hardware thread.
  int threads = 0;
  // spdlog level: trace, debug, info, warn, error, critical, off.
  std::string log_level = "info";
  // When set, the bound port is written there once the server listens
  // (useful with a listen port of 0), and the ggml-rpc port on a second
  // line when that listens.
  std::string port_file;
  // Sessions with no request for this long are closed; zero: never.
  absl::Duration session_idle_timeout = absl::Minutes(10);
  // Where Prometheus metrics are served over HTTP (GET /metrics); empty:
  // nowhere.
  std::string metrics_listen;
  // Where ggml's RPC protocol is served (server/ggml_rpc); empty: nowhere.
  // It has no authentication: loopback only unless security.insecure.
  std::string ggml_rpc_listen;
  // Most ggml-rpc connections at once, each served by a thread.
  size_t ggml_rpc_max_connections = 16;
  // Uploads that carry a content hash are kept for WriteTensorByHash: this
  // many bytes in memory, and every one in `cache_dir` when set.
  size_t cache_memory = size_t{2} << 30;
  std::string cache_dir;
  // On SIGTERM or SIGINT, how long calls in flight may take to finish.
  absl::Duration drain_timeout = absl::Seconds(30);
  Security security;
  Limits limits;
};

// Looks up an environment variable; nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// The process environment.
std::optional<std::string> ProcessEnv(const std::string& name);

// The usage text for --help: every flag, its environment variable and its
// default.
std::string Usage();

// Parses command-line flags (`args` without the program name), each written
// --name=value or --name value (a boolean flag alone means true; a boolean
// value is exactly true, 1, false or 0). A flag
// not on the command line falls back to the environment variable
// TESSERA_<NAME> (upper case), then to its default. Errors:
// INVALID_ARGUMENT naming the flag (or variable) for an unknown flag, a
// missing value or a value that does not parse.
absl::StatusOr<Config> ParseFlags(const std::vector<std::string>& args,
                                  const EnvLookup& env = ProcessEnv);

// The effective configuration, one "name=value" per flag, for the log. The
// token itself is never included, only its file.
std::string Describe(const Config& config);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_CONFIG_H_
