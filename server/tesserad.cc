// tesserad: serves this machine's devices over gRPC (proto/tessera.proto).
// Flags: see server/config.h or run `tesserad --help`. Stops on SIGINT or
// SIGTERM with a drain (Daemon::Drain): health turns NOT_SERVING, new
// sessions are refused, calls in flight get --drain_timeout to finish,
// every session is freed, and the exit status is 0.

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/operations/config.h"
#include "server/operations/daemon.h"
#include "server/operations/process_tuning.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace tessera::server {
namespace {

// Writes `port` (and on a second line the ggml-rpc port, when it listens)
// to `path` atomically (a temporary file renamed), so a reader
// never sees a partial number.
absl::Status WritePortFile(const std::string& path, int port,
                           int ggml_rpc_port) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (ggml_rpc_port != 0) out << ggml_rpc_port << "\n";
    if (!out.good()) {
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

int Run(const Config& config, const sigset_t& stop_signals) {
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  spdlog::info("configuration: {}", Describe(config));
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(config);
  if (!daemon.ok()) {
    spdlog::critical("{}", std::string(daemon.status().message()));
    return absl::IsUnavailable(daemon.status()) ? 1 : 2;
  }
  if (!config.port_file.empty()) {
    if (absl::Status s = WritePortFile(config.port_file, (*daemon)->port(),
                                     (*daemon)->ggml_rpc_port());
        !s.ok()) {
      spdlog::critical("{}", std::string(s.message()));
      return 1;
    }
  }
  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("signal {}: draining", signal);
  (*daemon)->Drain(config.drain_timeout);
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace tessera::server

int main(int argc, char** argv) {
  tessera::server::TuneProcess();
  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::vector<std::string> args(argv + 1, argv + argc);
  if (std::find(args.begin(), args.end(), "--help") != args.end()) {
    std::fputs(tessera::server::Usage().c_str(), stdout);
    return 0;
  }
  absl::StatusOr<tessera::server::Config> config =
      tessera::server::ParseFlags(args);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n%s", std::string(config.status().message()).c_str(),
                 tessera::server::Usage().c_str());
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("tesserad"));
  return tessera::server::Run(*config, stop_signals);
}
