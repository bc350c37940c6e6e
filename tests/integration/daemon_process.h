#ifndef TESSERA_TESTS_INTEGRATION_DAEMON_PROCESS_H_
#define TESSERA_TESTS_INTEGRATION_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tessera::testing {

// A real `tesserad` process for integration tests, listening on 127.0.0.1
// with a port the kernel picks. The binary comes from the test's runfiles
// (depend on this library; it carries //server:tesserad as data) or from
// $TESSERAD when set. The daemon's log goes to the test's stderr.
//
//   auto daemon = DaemonProcess::Start({"--devices=cpu:2"}).value();
//   auto channel = grpc::CreateChannel(daemon->address(),
//                                      grpc::InsecureChannelCredentials());
//
// Not thread-safe.
class DaemonProcess {
 public:
  // Where the daemon listens: 127.0.0.1 or a Unix socket in a private
  // directory.
  enum class Listen { kTcp, kUnix };

  // Starts tesserad with `flags` after the listen and port-file flags, and
  // waits (up to `timeout`) until it listens.
  // Errors: NOT_FOUND when the binary is missing; INTERNAL when it exits or
  // does not answer in time.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      std::vector<std::string> flags = {},
      absl::Duration timeout = absl::Seconds(120),
      Listen listen = Listen::kTcp);

  // Stops the daemon if it still runs: SIGTERM, then SIGKILL after 10 s.
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // "127.0.0.1:PORT" or "unix:PATH": a gRPC target.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  // The ggml-rpc port (with --ggml_rpc_listen=127.0.0.1:0); 0 when off.
  int ggml_rpc_port() const { return ggml_rpc_port_; }
  pid_t pid() const { return pid_; }

  // Sends `signal` to the daemon. Errors: FAILED_PRECONDITION once it has
  // exited.
  absl::Status Kill(int signal);
  // Whether the process has not exited (reaps it if it has).
  bool IsRunning();
  // Waits up to `timeout` for the daemon to exit and returns its wait
  // status (see waitpid). Errors: DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);

 private:
  DaemonProcess(pid_t pid, std::string dir) : pid_(pid), dir_(std::move(dir)) {}

  pid_t pid_;
  std::string dir_;  // holds the port file
  std::string address_;
  int port_ = 0;
  int ggml_rpc_port_ = 0;
  bool exited_ = false;
  int wait_status_ = 0;
};

// Path of a binary of this workspace, `label_path` (e.g. "client/tessera"),
// that the test carries as data: $`override_env` when set, else the
// runfiles copy. Errors: NOT_FOUND.
absl::StatusOr<std::string> RunfilesBinary(const std::string& label_path,
                                           const char* override_env);
// RunfilesBinary("server/tesserad", "TESSERAD").
absl::StatusOr<std::string> TesseradPath();

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_INTEGRATION_DAEMON_PROCESS_H_
