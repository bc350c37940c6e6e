#ifndef TESSERA_BENCH_BENCH_DAEMON_H_
#define TESSERA_BENCH_BENCH_DAEMON_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/operations/daemon.h"

namespace tessera::bench {

// The daemon a benchmark talks to: `target` when it is not empty, else one
// served in-process on an ephemeral 127.0.0.1 port with one CPU device of
// one thread (so requests still cross a loopback TCP connection).
struct BenchDaemon {
  std::unique_ptr<server::Daemon> daemon;  // null for a given target
  std::string target;
  // The in-process daemon's ggml-rpc port; 0 for a given target.
  int ggml_rpc_port = 0;
  // What the table header names.
  std::string Describe() const;
};

absl::StatusOr<BenchDaemon> StartBenchDaemon(const std::string& target);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_BENCH_DAEMON_H_
