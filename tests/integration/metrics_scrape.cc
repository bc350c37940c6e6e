#include "tests/integration/metrics_scrape.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/shell.h"

namespace tessera::testing {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string Curl(const std::string& url) {
  return RunCommand(absl::StrCat("curl -s --max-time 10 ", url)).output;
}

// Label values are Prometheus-escaped: \\, \" and \n inside the quotes.
std::map<std::string, double> Scrape(int port) {
  const std::string body =
      Curl(absl::StrCat("http://127.0.0.1:", port, "/metrics"));
  std::map<std::string, double> series;
  const std::string value = R"("(?:[^"\\\n]|\\[\\"n])*")";
  const std::regex sample(absl::StrCat(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_]+=)", value, R"((,[a-zA-Z_]+=)",
      value, R"()*\})?) ([-+0-9.eEInf]+))"));
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::smatch m;
    EXPECT_TRUE(std::regex_match(line, m, sample)) << "not Prometheus: " << line;
    if (!m.empty()) series[m[1]] = std::stod(m[4]);
  }
  return series;
}

}  // namespace tessera::testing
