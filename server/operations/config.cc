#include "server/operations/config.h"

#include <charconv>
#include <cstdlib>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "server/decoding/client_text.h"

namespace tessera::server {
namespace {

constexpr absl::string_view kLogLevels[] = {"trace", "debug",    "info", "warn",
                                           "error", "critical", "off"};

absl::Status Bad(absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("want ", want));
}

absl::StatusOr<uint64_t> ParseCount(absl::string_view value, uint64_t max) {
  uint64_t n = 0;
  auto [ptr, ec] =
      std::from_chars(value.data(), value.data() + value.size(), n);
  if (value.empty() || ec != std::errc() ||
      ptr != value.data() + value.size() || n > max) {
    return Bad(absl::StrCat("a whole number in [0, ", max, "]"));
  }
  return n;
}

// A byte count: digits with an optional K, M, G or T suffix (powers of 1024).
absl::StatusOr<uint64_t> ParseBytes(absl::string_view value) {
  uint64_t scale = 1;
  if (!value.empty()) {
    switch (absl::ascii_toupper(value.back())) {
      case 'K': scale = uint64_t{1} << 10; break;
      case 'M': scale = uint64_t{1} << 20; break;
      case 'G': scale = uint64_t{1} << 30; break;
      case 'T': scale = uint64_t{1} << 40; break;
      default: break;
    }
    if (scale != 1) value.remove_suffix(1);
  }
  absl::StatusOr<uint64_t> n = ParseCount(value, UINT64_MAX / scale);
  if (!n.ok()) return Bad("a byte count such as 1048576, 512M or 8G");
  return *n * scale;
}

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view value) {
  absl::Duration d;
  if (!absl::ParseDuration(value, &d) || d < absl::ZeroDuration()) {
    return Bad("a duration such as 90s, 10m or 0");
  }
  return d;
}

// Exactly the spellings --help documents; anything else (an empty value
// included) is an error rather than a guess.
absl::StatusOr<bool> ParseBool(absl::string_view value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  return Bad("true, 1, false or 0");
}

std::string Bytes(uint64_t n) { return n == 0 ? "0" : absl::StrCat(n); }

// One flag: how it parses into a Config and how a Config shows it.
struct Flag {
  const char* name;
  const char* hint;  // the value's form in --help; empty for a boolean
  const char* help;
  absl::Status (*apply)(absl::string_view value, Config& config);
  std::string (*show)(const Config& config);
};

const Flag kFlags[] = {
    {"listen", "HOST:PORT",
     "address to serve on; port 0 picks one; unix:PATH for a Unix socket",
     [](absl::string_view v, Config& c) {
       if (v.empty() || v.rfind(':') == absl::string_view::npos) {
         return Bad("HOST:PORT");
       }
       c.listen = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.listen; }},
    {"devices", "SPEC",
     "devices to serve, comma-separated: all, cpu, cpu:N, cuda, and "
     "NAME=meta(M0,M1,...), a tensor-parallel device over the devices "
     "named (e.g. cpu:2,tp0=meta(cpu0,cpu1))",
     [](absl::string_view v, Config& c) {
       if (v.empty()) return Bad("a device spec");
       c.devices = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.devices; }},
    {"threads", "N", "CPU threads per stream; 0: every hardware thread",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<uint64_t> n = ParseCount(v, 1024);
       if (!n.ok()) return n.status();
       c.threads = static_cast<int>(*n);
       return absl::OkStatus();
     },
     [](const Config& c) { return absl::StrCat(c.threads); }},
    {"log_level", "LEVEL", "trace, debug, info, warn, error, critical, off",
     [](absl::string_view v, Config& c) {
       for (absl::string_view level : kLogLevels) {
         if (level == v) {
           c.log_level = std::string(v);
           return absl::OkStatus();
         }
       }
       return Bad("trace, debug, info, warn, error, critical or off");
     },
     [](const Config& c) { return c.log_level; }},
    {"port_file", "PATH", "write the bound port to PATH once listening",
     [](absl::string_view v, Config& c) {
       c.port_file = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.port_file; }},
    {"session_idle_timeout", "DUR", "close sessions idle this long; 0: never",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<absl::Duration> d = ParseDuration(v);
       if (!d.ok()) return d.status();
       c.session_idle_timeout = *d;
       return absl::OkStatus();
     },
     [](const Config& c) { return absl::FormatDuration(c.session_idle_timeout); }},
    {"metrics_listen", "HOST:PORT",
     "serve Prometheus metrics at http://HOST:PORT/metrics",
     [](absl::string_view v, Config& c) {
       if (!v.empty() && v.rfind(':') == absl::string_view::npos) {
         return Bad("HOST:PORT");
       }
       c.metrics_listen = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.metrics_listen; }},
    {"ggml_rpc_listen", "HOST:PORT",
     "also serve ggml's RPC protocol (llama.cpp --rpc) there; empty: off",
     [](absl::string_view v, Config& c) {
       if (!v.empty() && v.rfind(':') == absl::string_view::npos) {
         return Bad("HOST:PORT");
       }
       c.ggml_rpc_listen = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.ggml_rpc_listen; }},
    {"ggml_rpc_max_connections", "N",
     "most ggml-rpc connections at once (one thread each)",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<uint64_t> n = ParseCount(v, 4096);
       if (!n.ok()) return n.status();
       if (*n == 0) return Bad("at least 1");
       c.ggml_rpc_max_connections = *n;
       return absl::OkStatus();
     },
     [](const Config& c) { return absl::StrCat(c.ggml_rpc_max_connections); }},
    {"cache_memory", "BYTES",
     "memory for content kept by hash (WriteTensorByHash); 0: none",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<uint64_t> n = ParseBytes(v);
       if (!n.ok()) return n.status();
       c.cache_memory = *n;
       return absl::OkStatus();
     },
     [](const Config& c) { return Bytes(c.cache_memory); }},
    {"cache_dir", "PATH",
     "directory that keeps content by hash across restarts",
     [](absl::string_view v, Config& c) {
       c.cache_dir = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.cache_dir; }},
    {"drain_timeout", "DUR",
     "on SIGTERM/SIGINT, how long calls in flight may take to finish",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<absl::Duration> d = ParseDuration(v);
       if (!d.ok()) return d.status();
       c.drain_timeout = *d;
       return absl::OkStatus();
     },
     [](const Config& c) { return absl::FormatDuration(c.drain_timeout); }},
    {"tls_cert", "PEM", "server certificate chain; enables TLS (with --tls_key)",
     [](absl::string_view v, Config& c) {
       c.security.tls_cert = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.security.tls_cert; }},
    {"tls_key", "PEM", "server private key",
     [](absl::string_view v, Config& c) {
       c.security.tls_key = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.security.tls_key; }},
    {"tls_client_ca", "PEM",
     "CA that client certificates must chain to (mutual TLS)",
     [](absl::string_view v, Config& c) {
       c.security.tls_client_ca = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.security.tls_client_ca; }},
    {"token_file", "PATH",
     "file holding the bearer token every call must carry",
     [](absl::string_view v, Config& c) {
       c.security.token_file = std::string(v);
       return absl::OkStatus();
     },
     [](const Config& c) { return c.security.token_file; }},
    {"insecure", "",
     "allow listening beyond loopback with neither TLS nor a token",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<bool> b = ParseBool(v);
       if (!b.ok()) return b.status();
       c.security.insecure = *b;
       return absl::OkStatus();
     },
     [](const Config& c) {
       return std::string(c.security.insecure ? "true" : "false");
     }},
    {"max_sessions", "N", "most sessions open at once",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<uint64_t> n = ParseCount(v, 1 << 20);
       if (!n.ok()) return n.status();
       if (*n == 0) return Bad("at least 1");
       c.limits.max_sessions = *n;
       return absl::OkStatus();
     },
     [](const Config& c) { return absl::StrCat(c.limits.max_sessions); }},
    {"max_execute_streams", "N", "most Execute streams open at once",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<uint64_t> n = ParseCount(v, 1 << 20);
       if (!n.ok()) return n.status();
       if (*n == 0) return Bad("at least 1");
       c.limits.max_execute_streams = *n;
       return absl::OkStatus();
     },
     [](const Config& c) {
       return absl::StrCat(c.limits.max_execute_streams);
     }},
    {"max_graph_nodes", "N", "most tensors in one graph",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<uint64_t> n = ParseCount(v, 1 << 24);
       if (!n.ok()) return n.status();
       if (*n == 0) return Bad("at least 1");
       c.limits.max_graph_nodes = static_cast<uint32_t>(*n);
       return absl::OkStatus();
     },
     [](const Config& c) { return absl::StrCat(c.limits.max_graph_nodes); }},
    {"session_memory_quota", "BYTES",
     "most memory one session may cause: buffers, compute, staging "
     "(e.g. 8G); 0: none",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<uint64_t> n = ParseBytes(v);
       if (!n.ok()) return n.status();
       c.limits.session_memory_quota = *n;
       return absl::OkStatus();
     },
     [](const Config& c) { return Bytes(c.limits.session_memory_quota); }},
    {"device_memory_reserve", "BYTES",
     "device memory that allocations must leave free on every device",
     [](absl::string_view v, Config& c) {
       absl::StatusOr<uint64_t> n = ParseBytes(v);
       if (!n.ok()) return n.status();
       c.limits.device_memory_reserve = *n;
       return absl::OkStatus();
     },
     [](const Config& c) { return Bytes(c.limits.device_memory_reserve); }},
};

const Flag* FindFlag(absl::string_view name) {
  for (const Flag& flag : kFlags) {
    if (name == flag.name) return &flag;
  }
  return nullptr;
}

std::string EnvName(absl::string_view flag) {
  return absl::StrCat("TESSERA_", absl::AsciiStrToUpper(flag));
}

absl::Status Apply(const Flag& flag, absl::string_view value,
                   absl::string_view source, Config& config) {
  absl::Status s = flag.apply(value, config);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat(
      "[ParseFlags] ", source, "=\"", ClientText(value, 64), "\": ",
      s.message()));
}

}  // namespace

std::optional<std::string> ProcessEnv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string Usage() {
  const Config defaults;
  std::string out =
      "usage: tesserad [flags]\n"
      "Each flag may also be set by the environment variable named after "
      "it;\nthe command line wins. A boolean is true, 1, false or 0 (a "
      "boolean flag\nalone means true); any other value, empty included, is "
      "refused.\n\n";
  for (const Flag& flag : kFlags) {
    const std::string spelled =
        *flag.hint == '\0' ? absl::StrCat("--", flag.name)
                           : absl::StrCat("--", flag.name, "=", flag.hint);
    std::string shown = flag.show(defaults);
    if (shown.empty()) shown = "unset";
    absl::StrAppendFormat(&out, "  %-30s %s\n  %-30s $%s, default %s\n",
                          spelled, flag.help, "", EnvName(flag.name), shown);
  }
  return out;
}

absl::StatusOr<Config> ParseFlags(const std::vector<std::string>& args,
                                  const EnvLookup& env) {
  Config config;
  std::set<std::string> given;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[ParseFlags] unexpected argument \"", arg, "\" (see --help)"));
    }
    arg.remove_prefix(2);
    absl::string_view name = arg;
    std::optional<absl::string_view> value;
    if (const size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const Flag* flag = FindFlag(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("[ParseFlags] unknown flag --", name, " (see --help)"));
    }
    if (!value.has_value()) {
      if (*flag->hint == '\0') {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("[ParseFlags] --", name, " needs a value"));
      }
    }
    if (absl::Status s =
            Apply(*flag, *value, absl::StrCat("--", name), config);
        !s.ok()) {
      return s;
    }
    given.insert(std::string(name));
  }
  for (const Flag& flag : kFlags) {
    if (given.count(flag.name) != 0) continue;
    const std::string var = EnvName(flag.name);
    if (std::optional<std::string> value = env(var); value.has_value()) {
      if (absl::Status s = Apply(flag, *value, absl::StrCat("$", var), config);
          !s.ok()) {
        return s;
      }
    }
  }
  return config;
}

std::string Describe(const Config& config) {
  std::string out;
  for (const Flag& flag : kFlags) {
    absl::StrAppend(&out, out.empty() ? "" : " ", flag.name, "=",
                    flag.show(config));
  }
  return out;
}

}  // namespace tessera::server
