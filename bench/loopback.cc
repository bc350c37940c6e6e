#include "bench/loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bench/cpu_pinning.h"

namespace tessera::bench {
namespace {

// Commands: a byte and two 8-byte numbers. 'u' offset size, then size
// bytes, answered by one byte; 'd' offset size, answered by size bytes; 'x'
// count reply, then the number of messages per exchange and their sizes
// (8 bytes each), then count exchanges ('X': the same, the server polling
// for each message); 'q' (alone) ends the server.
bool SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool RecvAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Returns once `fd` is readable or closed, without sleeping.
void AwaitReadable(int fd) {
  pollfd readable = {fd, POLLIN, 0};
  while (poll(&readable, 1, 0) == 0) {
  }
}

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

constexpr size_t kBlock = 1 << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<Loopback>> Loopback::Open(
    size_t server_bytes) {
  std::unique_ptr<Loopback> lb(new Loopback);
  lb->server_memory_.assign(server_bytes, 1);
  lb->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (lb->listen_fd_ < 0) return Errno("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(lb->listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(lb->listen_fd_, 1) != 0 ||
      getsockname(lb->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) !=
          0) {
    return Errno("bind/listen");
  }
  lb->client_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (lb->client_fd_ < 0 ||
      connect(lb->client_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Errno("connect");
  }
  lb->server_fd_ = accept(lb->listen_fd_, nullptr, nullptr);
  if (lb->server_fd_ < 0) return Errno("accept");
  NoDelay(lb->client_fd_);
  NoDelay(lb->server_fd_);
  lb->server_ = std::thread(&Loopback::Serve, lb.get());
  return lb;
}

Loopback::~Loopback() {
  if (server_.joinable()) {
    const char quit = 'q';
    SendAll(client_fd_, &quit, 1);
    server_.join();
  }
  for (int fd : {client_fd_, server_fd_, listen_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void Loopback::Serve() {
  std::vector<char> echo(kBlock);
  char cmd = 0;
  uint64_t header[2] = {0, 0};
  while (RecvAll(server_fd_, &cmd, 1) && cmd != 'q' &&
         RecvAll(server_fd_, header, sizeof(header))) {
    if (cmd == 'x' || cmd == 'X') {
      const uint64_t count = header[0];
      const uint64_t reply = header[1];
      uint64_t messages = 0;
      if (!RecvAll(server_fd_, &messages, sizeof(messages)) || messages > 16) {
        return;
      }
      std::vector<uint64_t> sizes(messages);
      if (!RecvAll(server_fd_, sizes.data(), messages * sizeof(uint64_t))) {
        return;
      }
      for (uint64_t i = 0; i < count; ++i) {
        for (uint64_t size : sizes) {
          if (cmd == 'X') AwaitReadable(server_fd_);
          if (size > echo.size() || !RecvAll(server_fd_, echo.data(), size)) {
            return;
          }
        }
        if (reply > echo.size() || !SendAll(server_fd_, echo.data(), reply)) {
          return;
        }
      }
      continue;
    }
    const uint64_t offset = header[0];
    const uint64_t size = header[1];
    if (offset > server_memory_.size() ||
        size > server_memory_.size() - offset) {
      return;
    }
    char* at = server_memory_.data() + offset;
    if (cmd == 'u') {
      if (!RecvAll(server_fd_, at, size) || !SendAll(server_fd_, &cmd, 1)) {
        return;
      }
    } else if (cmd == 'd') {
      if (!SendAll(server_fd_, at, size)) return;
    }
  }
}

absl::StatusOr<double> Loopback::Upload(const void* data, size_t offset,
                                        size_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  const char cmd = 'u';
  const uint64_t header[2] = {offset, bytes};
  char ack = 0;
  if (!SendAll(client_fd_, &cmd, 1) ||
      !SendAll(client_fd_, header, sizeof(header)) ||
      !SendAll(client_fd_, data, bytes) || !RecvAll(client_fd_, &ack, 1)) {
    return Errno("upload");
  }
  return Since(start);
}

absl::StatusOr<double> Loopback::Download(void* data, size_t offset,
                                          size_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  const char cmd = 'd';
  const uint64_t header[2] = {offset, bytes};
  if (!SendAll(client_fd_, &cmd, 1) ||
      !SendAll(client_fd_, header, sizeof(header)) ||
      !RecvAll(client_fd_, data, bytes)) {
    return Errno("download");
  }
  return Since(start);
}

absl::StatusOr<std::vector<double>> Loopback::Exchange(
    const std::vector<size_t>& sends, size_t reply, int n, Reader reader) {
  size_t largest = reply;
  for (size_t size : sends) largest = std::max(largest, size);
  if (sends.size() > 16 || largest > kBlock) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an exchange of at most 16 messages of at most ", kBlock, " bytes"));
  }
  std::vector<char> buf(largest, 7);
  const char cmd = reader == Reader::kPolls ? 'X' : 'x';
  const uint64_t header[2] = {static_cast<uint64_t>(n), reply};
  const uint64_t messages = sends.size();
  const std::vector<uint64_t> sizes(sends.begin(), sends.end());
  if (!SendAll(client_fd_, &cmd, 1) ||
      !SendAll(client_fd_, header, sizeof(header)) ||
      !SendAll(client_fd_, &messages, sizeof(messages)) ||
      !SendAll(client_fd_, sizes.data(), messages * sizeof(uint64_t))) {
    return Errno("exchange");
  }
  std::vector<double> rtts;
  for (int i = 0; i < n; ++i) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t size : sends) {
      if (!SendAll(client_fd_, buf.data(), size)) return Errno("exchange");
    }
    if (!RecvAll(client_fd_, buf.data(), reply)) return Errno("exchange");
    rtts.push_back(Since(start));
  }
  return rtts;
}

absl::Status Loopback::PinServer(const std::vector<int>& cpus) {
  return PinThread(server_, cpus);
}

double Percentile(std::vector<double>& samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const size_t i = std::min(samples.size() - 1,
                            static_cast<size_t>(p * samples.size()));
  return samples[i];
}

}  // namespace tessera::bench
