#include "server/operations/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/operations/metrics_http.h"

namespace tessera::server {
namespace {

TEST(MetricsTest, RendersCountersAndHistograms) {
  Metrics metrics({"/tessera.v1.Tessera/Hello", "/tessera.v1.Tessera/FreeBuffer"});
  metrics.ObserveCall("/tessera.v1.Tessera/Hello", grpc::StatusCode::OK,
                      absl::Microseconds(300));
  metrics.ObserveCall("/tessera.v1.Tessera/Hello", grpc::StatusCode::OK,
                      absl::Seconds(2));
  metrics.ObserveCall("/tessera.v1.Tessera/FreeBuffer",
                      grpc::StatusCode::NOT_FOUND, absl::Microseconds(50));
  metrics.AddReceived(1000);
  metrics.AddSent(24);
  const std::string text =
      metrics.Render({.sessions = 2,
                      .work_in_flight = 3,
                      .devices = {{"cpu0", 10, 100}}});
  for (const char* line : {
           "tessera_rpcs_total{method=\"/tessera.v1.Tessera/Hello\",code=\"OK\"} 2",
           "tessera_rpcs_total{method=\"/tessera.v1.Tessera/FreeBuffer\",code=\"NOT_FOUND\"} 1",
           "tessera_rpc_duration_seconds_bucket{method=\"/tessera.v1.Tessera/Hello\",le=\"0.0005\"} 1",
           "tessera_rpc_duration_seconds_bucket{method=\"/tessera.v1.Tessera/Hello\",le=\"+Inf\"} 2",
           "tessera_rpc_duration_seconds_count{method=\"/tessera.v1.Tessera/Hello\"} 2",
           "tessera_received_bytes_total 1000",
           "tessera_sent_bytes_total 24",
           "tessera_sessions 2",
           "tessera_work_in_flight 3",
           "tessera_device_memory_used_bytes{device=\"cpu0\"} 10",
           "tessera_device_memory_total_bytes{device=\"cpu0\"} 100",
           "tessera_graph_execution_seconds_count 0",
       }) {
    EXPECT_NE(text.find(std::string(line) + "\n"), std::string::npos) << line;
  }
  // Every line is a comment or a sample.
  const std::regex sample(R"([a-z_]+(\{[^}]*\})? [-+0-9.e]+)");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
  }
}

TEST(MetricsTest, UnknownMethodsShareOneLabel) {
  Metrics metrics({"/tessera.v1.Tessera/Hello"});
  for (int i = 0; i < 300; ++i) {
    metrics.ObserveCall(absl::StrCat("/made.up/Method", i),
                        grpc::StatusCode::UNAUTHENTICATED,
                        absl::Microseconds(10));
  }
  const std::string text = metrics.Render({});
  EXPECT_EQ(text.find("made.up"), std::string::npos);
  EXPECT_NE(text.find("tessera_rpcs_total{method=\"other\",code=\""
                      "UNAUTHENTICATED\"} 300\n"),
            std::string::npos)
      << text;
  EXPECT_LT(text.size(), 4096u);
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  const std::string odd = "/x\"y\\z\nw";
  Metrics metrics({odd});
  metrics.ObserveCall(odd, grpc::StatusCode::OK, absl::Microseconds(10));
  const std::string text =
      metrics.Render({.devices = {{"cpu\"0\n", 1, 2}}});
  EXPECT_NE(text.find("tessera_rpcs_total{method=\"/x\\\"y\\\\z\\nw\","
                      "code=\"OK\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_device_memory_total_bytes{device=\"cpu\\\"0\\n\"} 2\n"),
            std::string::npos)
      << text;
  // Still one sample per line, each value a properly escaped string.
  const std::regex sample(
      R"([a-z_]+(\{([a-z]+="([^"\\\n]|\\[\\"n])*",?)*\})? [-+0-9.e]+)");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
  }
}

// Connects to 127.0.0.1:`port`; -1 on failure.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string Get(int port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_GE(fd, 0);
  send(fd, request.data(), request.size(), 0);
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) reply.append(buf, n);
  close(fd);
  return reply;
}

TEST(MetricsHttpTest, ServesMetricsAndNothingElse) {
  auto http =
      MetricsHttp::Start("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(http.ok()) << http.status();
  const std::string ok =
      Get((*http)->port(),
          "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_EQ(ok.substr(ok.size() - 4), "x 1\n");
  EXPECT_EQ(Get((*http)->port(), "GET / HTTP/1.1\r\n\r\n").rfind(
                "HTTP/1.1 404", 0),
            0u);
  EXPECT_FALSE(MetricsHttp::Start("nocolon", [] { return std::string(); }).ok());
}

// Clients that send their request one byte a second, or nothing at all,
// do not hold up scrapes, and the server still stops promptly.
TEST(MetricsHttpTest, SlowClientsDoNotBlockScrapes) {
  auto http =
      MetricsHttp::Start("127.0.0.1:0", [] { return std::string("x 1\n"); });
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = (*http)->port();
  std::atomic<bool> stop{false};
  std::thread slow([&] {
    const int fd = Connect(port);
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
    for (size_t i = 0; i < request.size() && !stop; ++i) {
      send(fd, &request[i], 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    close(fd);
  });
  const int silent = Connect(port);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < 5; ++i) {
    const std::string ok =
        Get(port, "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  }
  stop = true;
  slow.join();
  close(silent);
  http->reset();
}

}  // namespace
}  // namespace tessera::server
