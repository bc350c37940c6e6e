#include "bench/bench_daemon.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tessera::bench {

std::string BenchDaemon::Describe() const {
  return daemon != nullptr ? "an in-process daemon" : target;
}

absl::StatusOr<BenchDaemon> StartBenchDaemon(const std::string& target) {
  BenchDaemon out;
  out.target = target;
  if (target.empty()) {
    server::Config config;
    config.listen = "127.0.0.1:0";
    config.devices = "cpu";
    config.threads = 1;
    config.ggml_rpc_listen = "127.0.0.1:0";
    TESSERA_ASSIGN_OR_RETURN(out.daemon, server::Daemon::Start(config));
    out.target = absl::StrCat("127.0.0.1:", out.daemon->port());
    out.ggml_rpc_port = out.daemon->ggml_rpc_port();
  }
  return out;
}

}  // namespace tessera::bench
