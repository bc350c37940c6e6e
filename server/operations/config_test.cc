#include "server/operations/config.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera::server {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](
             const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ConfigTest, DefaultsListenOnLoopbackWithEveryDevice) {
  Config config = ParseFlags({}, FakeEnv({})).value();
  EXPECT_EQ(config.listen, "127.0.0.1:50051");
  EXPECT_EQ(config.devices, "all");
  EXPECT_EQ(config.threads, 0);
  EXPECT_EQ(config.session_idle_timeout, absl::Minutes(10));
  EXPECT_EQ(config.limits.max_chunk_bytes, size_t{4} << 20);
}

TEST(ConfigTest, ParsesEveryFlagInBothForms) {
  Config config =
      ParseFlags({"--listen=0.0.0.0:0", "--devices", "cpu:3", "--threads=2",
                  "--log_level=debug", "--port_file=/tmp/p",
                  "--session_idle_timeout=90s"})
          .value();
  EXPECT_EQ(config.listen, "0.0.0.0:0");
  EXPECT_EQ(config.devices, "cpu:3");
  EXPECT_EQ(config.threads, 2);
  EXPECT_EQ(config.log_level, "debug");
  EXPECT_EQ(config.port_file, "/tmp/p");
  EXPECT_EQ(config.session_idle_timeout, absl::Seconds(90));
}

TEST(ConfigTest, RejectsBadFlagsNamingThem) {
  for (const char* bad :
       {"--nope=1", "--threads=-1", "--threads=x", "--log_level=loud",
        "--session_idle_timeout=soon", "--listen=nocolon", "positional",
        "--devices"}) {
    absl::StatusOr<Config> config = ParseFlags({bad});
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_NE(ParseFlags({"--threads=x"}).status().message().find("--threads"),
            absl::string_view::npos);
}

TEST(ConfigTest, EnvironmentVariablesAreFallbacks) {
  Config config =
      ParseFlags({"--threads=3"},
                 FakeEnv({{"TESSERA_THREADS", "7"},
                          {"TESSERA_DEVICES", "cpu:2"},
                          {"TESSERA_SESSION_MEMORY_QUOTA", "512M"},
                          {"TESSERA_INSECURE", "1"},
                          {"TESSERA_DRAIN_TIMEOUT", "2s"}}))
          .value();
  EXPECT_EQ(config.threads, 3);  // the command line wins
  EXPECT_EQ(config.devices, "cpu:2");
  EXPECT_EQ(config.limits.session_memory_quota, uint64_t{512} << 20);
  EXPECT_TRUE(config.security.insecure);
  EXPECT_EQ(config.drain_timeout, absl::Seconds(2));
}

TEST(ConfigTest, BadEnvironmentValuesNameTheVariable) {
  absl::StatusOr<Config> config =
      ParseFlags({}, FakeEnv({{"TESSERA_MAX_SESSIONS", "many"}}));
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("$TESSERA_MAX_SESSIONS"),
            absl::string_view::npos);
}

TEST(ConfigTest, SecurityAndLimitFlags) {
  Config config =
      ParseFlags({"--tls_cert=c.pem", "--tls_key", "k.pem",
                  "--tls_client_ca=ca.pem", "--token_file=t", "--insecure",
                  "--max_sessions=3", "--max_graph_nodes=100",
                  "--session_memory_quota=2G",
                  "--device_memory_reserve=1048576"},
                 FakeEnv({}))
          .value();
  EXPECT_TRUE(config.security.tls());
  EXPECT_EQ(config.security.tls_key, "k.pem");
  EXPECT_EQ(config.security.tls_client_ca, "ca.pem");
  EXPECT_EQ(config.security.token_file, "t");
  EXPECT_TRUE(config.security.insecure);
  EXPECT_EQ(config.limits.max_sessions, 3u);
  EXPECT_EQ(config.limits.max_graph_nodes, 100u);
  EXPECT_EQ(config.limits.session_memory_quota, uint64_t{2} << 30);
  EXPECT_EQ(config.limits.device_memory_reserve, uint64_t{1} << 20);
  EXPECT_FALSE(ParseFlags({"--session_memory_quota=8Q"}, FakeEnv({})).ok());
}

TEST(ConfigTest, BooleansTakeOnlyTheDocumentedSpellings) {
  for (const char* yes : {"true", "1"}) {
    EXPECT_TRUE(ParseFlags({absl::StrCat("--insecure=", yes)}, FakeEnv({}))
                    ->security.insecure);
    EXPECT_TRUE(ParseFlags({}, FakeEnv({{"TESSERA_INSECURE", yes}}))
                    ->security.insecure);
  }
  for (const char* no : {"false", "0"}) {
    EXPECT_FALSE(ParseFlags({absl::StrCat("--insecure=", no)}, FakeEnv({}))
                     ->security.insecure);
    EXPECT_FALSE(ParseFlags({}, FakeEnv({{"TESSERA_INSECURE", no}}))
                     ->security.insecure);
  }
  for (const char* bad : {"", "yes", "no", "TRUE", "on", " 1", "maybe"}) {
    absl::StatusOr<Config> flag =
        ParseFlags({absl::StrCat("--insecure=", bad)}, FakeEnv({}));
    EXPECT_EQ(flag.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    absl::StatusOr<Config> env =
        ParseFlags({}, FakeEnv({{"TESSERA_INSECURE", bad}}));
    EXPECT_EQ(env.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(env.status().message().find("$TESSERA_INSECURE"),
              absl::string_view::npos);
    EXPECT_NE(env.status().message().find("true, 1, false or 0"),
              absl::string_view::npos);
  }
}

TEST(ConfigTest, AValueInAnErrorIsBoundedAndEscaped) {
  const std::string value = std::string(1 << 20, 'x') + "\n";
  absl::StatusOr<Config> config = ParseFlags({"--threads=" + value}, FakeEnv({}));
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(config.status().message().size(), 512u);
  absl::StatusOr<Config> forged =
      ParseFlags({}, FakeEnv({{"TESSERA_THREADS", "1\n[info] forged"}}));
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(forged.status().message().find('\n'), absl::string_view::npos);
}

TEST(ConfigTest, UsageAndDescribeCoverEveryFlag) {
  const std::string usage = Usage();
  const std::string described = Describe(Config{});
  for (const char* flag :
       {"listen", "devices", "threads", "log_level", "port_file",
        "session_idle_timeout", "metrics_listen", "cache_memory", "cache_dir",
        "drain_timeout", "tls_cert", "tls_key",
        "tls_client_ca", "token_file", "insecure", "max_sessions",
        "max_graph_nodes", "session_memory_quota", "device_memory_reserve"}) {
    EXPECT_NE(usage.find(absl::StrCat("--", flag)), std::string::npos) << flag;
    EXPECT_NE(usage.find(absl::StrCat("$TESSERA_", absl::AsciiStrToUpper(flag))),
              std::string::npos)
        << flag;
    EXPECT_NE(described.find(absl::StrCat(flag, "=")), std::string::npos)
        << flag;
  }
}

}  // namespace
}  // namespace tessera::server
