#include "server/config.h"

#include "gtest/gtest.h"

namespace tessera::server {
namespace {

TEST(ConfigTest, DefaultsListenOnLoopbackWithEveryDevice) {
  Config config = ParseFlags({}).value();
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

}  // namespace
}  // namespace tessera::server
