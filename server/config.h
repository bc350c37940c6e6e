#ifndef TESSERA_SERVER_CONFIG_H_
#define TESSERA_SERVER_CONFIG_H_

#include <cstddef>
#include <cstdint>
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
  // Most requests one Execute stream queues before it stops reading.
  size_t max_queued_executions = 64;
};

// Everything tesserad is configured with.
struct Config {
  std::string listen = "127.0.0.1:50051";
  // backend/registry.h AddDevices spec; "all" is every local device.
  std::string devices = "all";
  // Threads each CPU stream computes with; 0 means one per hardware thread.
  int threads = 0;
  // spdlog level: trace, debug, info, warn, error, critical, off.
  std::string log_level = "info";
  // When set, the bound port is written there once the server listens
  // (useful with a listen port of 0).
  std::string port_file;
  // Sessions with no request for this long are closed; zero: never.
  absl::Duration session_idle_timeout = absl::Minutes(10);
  Limits limits;
};

// The usage text for --help.
std::string Usage();

// Parses command-line flags (`args` without the program name), each written
// --name=value or --name value:
//   --listen=HOST:PORT          default 127.0.0.1:50051
//   --devices=SPEC              default "all" (every local device); "cpu:N"
//   --threads=N                 CPU threads per stream, default: all
//   --log_level=LEVEL           default info
//   --port_file=PATH            write the bound port there
//   --session_idle_timeout=DUR  e.g. 90s, 10m, 0 (never); default 10m
// Errors: INVALID_ARGUMENT naming the flag for an unknown flag, a missing
// value or a value that does not parse.
absl::StatusOr<Config> ParseFlags(const std::vector<std::string>& args);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_CONFIG_H_
