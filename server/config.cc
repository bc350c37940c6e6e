#include "server/config.h"

#include <charconv>
#include "absl/strings/string_view.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tessera::server {
namespace {

constexpr absl::string_view kLogLevels[] = {"trace", "debug",    "info", "warn",
                                           "error", "critical", "off"};

absl::Status BadFlag(absl::string_view name, absl::string_view value,
                     absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat(
      "[ParseFlags] --", name, "=\"", value, "\": want ", want));
}

// Applies one flag to `config`.
absl::Status Apply(absl::string_view name, absl::string_view value,
                   Config& config) {
  if (name == "listen") {
    if (value.empty() || value.rfind(':') == absl::string_view::npos) {
      return BadFlag(name, value, "HOST:PORT");
    }
    config.listen = std::string(value);
  } else if (name == "devices") {
    if (value.empty()) return BadFlag(name, value, "a device spec");
    config.devices = std::string(value);
  } else if (name == "threads") {
    int n = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || ptr != value.data() + value.size() || n < 0 ||
        n > 1024) {
      return BadFlag(name, value, "a thread count in [0, 1024]");
    }
    config.threads = n;
  } else if (name == "log_level") {
    bool known = false;
    for (absl::string_view level : kLogLevels) known = known || level == value;
    if (!known) {
      return BadFlag(name, value,
                     "trace, debug, info, warn, error, critical or off");
    }
    config.log_level = std::string(value);
  } else if (name == "port_file") {
    config.port_file = std::string(value);
  } else if (name == "session_idle_timeout") {
    absl::Duration d;
    if (!absl::ParseDuration(value, &d) || d < absl::ZeroDuration()) {
      return BadFlag(name, value, "a duration such as 90s, 10m or 0");
    }
    config.session_idle_timeout = d;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("[ParseFlags] unknown flag --", name, " (see --help)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Usage() {
  return "usage: tesserad [flags]\n"
         "  --listen=HOST:PORT          address to serve on (default "
         "127.0.0.1:50051; port 0 picks one)\n"
         "  --devices=SPEC              devices to serve: all (default), cpu, "
         "cpu:N, cuda, comma-separated\n"
         "  --threads=N                 CPU threads per stream (default: every "
         "hardware thread)\n"
         "  --log_level=LEVEL           trace, debug, info (default), warn, "
         "error, critical, off\n"
         "  --port_file=PATH            write the bound port to PATH once "
         "listening\n"
         "  --session_idle_timeout=DUR  close sessions idle this long (default "
         "10m; 0: never)\n";
}

absl::StatusOr<Config> ParseFlags(const std::vector<std::string>& args) {
  Config config;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[ParseFlags] unexpected argument \"", arg, "\" (see --help)"));
    }
    arg.remove_prefix(2);
    absl::string_view name = arg;
    absl::string_view value;
    if (const size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("[ParseFlags] --", name, " needs a value"));
    }
    if (absl::Status s = Apply(name, value, config); !s.ok()) return s;
  }
  return config;
}

}  // namespace tessera::server
