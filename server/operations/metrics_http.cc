#include "server/operations/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace tessera::server {
namespace {

void SendAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttp>> MetricsHttp::Start(
    const std::string& listen, std::function<std::string()> render) {
  const size_t colon = listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen=", listen, ": want HOST:PORT"));
  }
  std::string host = listen.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(),
                  &hints, &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen=", listen, ": unknown host"));
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = fd >= 0 &&
                     bind(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                     ::listen(fd, 16) == 0;
  freeaddrinfo(found);
  if (!bound) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", listen, ": ", why));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int bound_port =
      ntohs(addr.ss_family == AF_INET6
                ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return std::unique_ptr<MetricsHttp>(
      new MetricsHttp(fd, bound_port, std::move(render)));
}

MetricsHttp::MetricsHttp(int fd, int port, std::function<std::string()> render)
    : fd_(fd), port_(port), render_(std::move(render)) {
  if (pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
  thread_ = std::thread([this] { Serve(); });
}

MetricsHttp::~MetricsHttp() {
  if (wake_[1] >= 0) (void)write(wake_[1], "x", 1);
  thread_.join();
  close(fd_);
  for (int end : wake_) {
    if (end >= 0) close(end);
  }
}

void MetricsHttp::Serve() {
  while (true) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, wake_[0] >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("metrics: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    Answer(client);
    close(client);
  }
}

// Reads the request head (up to 8 KiB, 2 s) and answers it.
void MetricsHttp::Answer(int client) {
  const timeval timeout = {2, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string head;
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < 8192) {
    const ssize_t n = recv(client, buf, sizeof(buf), 0);
    if (n <= 0) break;
    head.append(buf, static_cast<size_t>(n));
  }
  if (absl::StartsWith(head, "GET /metrics ") ||
      absl::StartsWith(head, "GET /metrics?")) {
    const std::string body = render_();
    SendAll(client, absl::StrCat("HTTP/1.1 200 OK\r\n"
                                 "Content-Type: text/plain; version=0.0.4; "
                                 "charset=utf-8\r\nContent-Length: ",
                                 body.size(), "\r\nConnection: close\r\n\r\n",
                                 body));
  } else {
    SendAll(client,
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
            "Content-Length: 23\r\nConnection: close\r\n\r\nonly /metrics is here.\n");
  }
}

}  // namespace tessera::server
