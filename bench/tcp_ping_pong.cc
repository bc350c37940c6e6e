#include "bench/tcp_ping_pong.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::bench {
namespace {

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool RecvAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

void NoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

absl::StatusOr<std::vector<double>> TcpPingPong(size_t size, int n) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener < 0 ||
      bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (listener >= 0) close(listener);
    return absl::UnavailableError(
        absl::StrCat("[TcpPingPong] listen: ", strerror(errno)));
  }
  const int warmup = n / 10;
  std::thread echo([listener, size, total = warmup + n] {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    NoDelay(fd);
    std::vector<char> buf(size);
    for (int i = 0; i < total; ++i) {
      if (!RecvAll(fd, buf.data(), size) || !SendAll(fd, buf.data(), size)) {
        break;
      }
    }
    close(fd);
  });
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  std::vector<double> out;
  absl::Status status;
  if (fd < 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    status = absl::UnavailableError(
        absl::StrCat("[TcpPingPong] connect: ", strerror(errno)));
  } else {
    NoDelay(fd);
    std::vector<char> buf(size, 1);
    for (int i = 0; i < warmup + n && status.ok(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      if (!SendAll(fd, buf.data(), size) || !RecvAll(fd, buf.data(), size)) {
        status = absl::UnavailableError("[TcpPingPong] connection lost");
        break;
      }
      if (i >= warmup) {
        out.push_back(std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count());
      }
    }
  }
  if (fd >= 0) close(fd);
  shutdown(listener, SHUT_RDWR);
  echo.join();
  close(listener);
  if (!status.ok()) return status;
  return out;
}

}  // namespace tessera::bench
