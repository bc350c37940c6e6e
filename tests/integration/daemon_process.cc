#include "tests/integration/daemon_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera::testing {
namespace {

bool IsExecutable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// Reads a whole number from `path`, or 0 while it is missing or partial.
// The port on line `line` (0 or 1) of the port file; 0 when absent.
int ReadPort(const std::string& path, int line = 0) {
  std::ifstream in(path);
  int port = 0;
  for (int i = 0; i <= line; ++i) {
    if (!(in >> port)) return 0;
  }
  return port;
}

std::string Describe(int wait_status) {
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status));
  }
  return absl::StrCat("stopped (wait status ", wait_status, ")");
}

}  // namespace

absl::StatusOr<std::string> RunfilesBinary(const std::string& label_path,
                                           const char* override_env) {
  const std::string runfiles_path = absl::StrCat("tessera/", label_path);
  std::vector<std::string> candidates = {Env(override_env)};
  for (const char* root : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    if (std::string dir = Env(root); !dir.empty()) {
      candidates.push_back(absl::StrCat(dir, "/", runfiles_path));
    }
  }
  std::error_code error;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    candidates.push_back(
        absl::StrCat(self.string(), ".runfiles/", runfiles_path));
  }
  for (const std::string& path : candidates) {
    if (IsExecutable(path)) return path;
  }
  return absl::NotFoundError(
      absl::StrCat("[DaemonProcess] no ", label_path, " binary: set $",
                   override_env, " or carry it in the test's data"));
}

absl::StatusOr<std::string> TesseradPath() {
  return RunfilesBinary("server/tesserad", "TESSERAD");
}

// 1. Make a private directory for the port file.
// 2. Fork; the child asks to be killed with its parent thread and execs
//    tesserad --listen=127.0.0.1:0 (or unix:DIR/tesserad.sock)
//    --port_file=DIR/port FLAGS...
// 3. Poll for the port file while the child lives: tesserad writes it once
//    its server listens (with TLS or without).
absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    std::vector<std::string> flags, absl::Duration timeout, Listen listen) {
  absl::StatusOr<std::string> binary = TesseradPath();
  if (!binary.ok()) return binary.status();

  // A socket's path has at most 107 characters: a test's temporary
  // directory may be too deep for one.
  std::string tmp = listen == Listen::kUnix ? "" : Env("TEST_TMPDIR");
  if (tmp.empty()) tmp = "/tmp";
  std::string templ = absl::StrCat(tmp, "/tesserad.XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat(
        "[DaemonProcess] mkdtemp in ", tmp, ": ", std::strerror(errno)));
  }
  const std::string port_file = absl::StrCat(templ, "/port");

  const std::string socket = absl::StrCat("unix:", templ, "/tesserad.sock");
  std::vector<std::string> args = {
      *binary,
      absl::StrCat("--listen=",
                   listen == Listen::kTcp ? "127.0.0.1:0" : socket),
      absl::StrCat("--port_file=", port_file)};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("[DaemonProcess] fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::unique_ptr<DaemonProcess> daemon(new DaemonProcess(pid, templ));

  const absl::Time deadline = absl::Now() + timeout;
  while (daemon->port_ == 0) {
    if (!daemon->IsRunning()) {
      return absl::InternalError(absl::StrCat(
          "[DaemonProcess] tesserad ", Describe(daemon->wait_status_),
          " before listening (see its log above)"));
    }
    if (absl::Now() > deadline) {
      return absl::InternalError(absl::StrCat(
          "[DaemonProcess] tesserad wrote no port file in ",
          absl::FormatDuration(timeout)));
    }
    daemon->port_ = ReadPort(port_file);
    if (daemon->port_ == 0) absl::SleepFor(absl::Milliseconds(5));
  }
  daemon->address_ = listen == Listen::kTcp
                        ? absl::StrCat("127.0.0.1:", daemon->port_)
                        : socket;
  daemon->ggml_rpc_port_ = ReadPort(port_file, 1);
  return daemon;
}

DaemonProcess::~DaemonProcess() {
  if (IsRunning()) {
    kill(pid_, SIGTERM);
    if (!Wait(absl::Seconds(10)).ok()) {
      kill(pid_, SIGKILL);
      (void)Wait(absl::Seconds(10));
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

absl::Status DaemonProcess::Kill(int signal) {
  if (!IsRunning()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[DaemonProcess] tesserad (pid ", pid_, ") has exited"));
  }
  if (kill(pid_, signal) != 0) {
    return absl::InternalError(
        absl::StrCat("[DaemonProcess] kill: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

bool DaemonProcess::IsRunning() {
  if (exited_) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exited_ = true;
    wait_status_ = status;
  }
  return !exited_;
}

absl::StatusOr<int> DaemonProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (IsRunning()) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("[DaemonProcess] tesserad (pid ", pid_,
                       ") still runs after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return wait_status_;
}

}  // namespace tessera::testing
