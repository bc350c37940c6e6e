#include "server/ggml_rpc/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "backend/spin.h"

namespace tessera::server::ggml_rpc {
namespace {

// How long a read polls for data before it sleeps in recv. A client that
// waits for each reply sends its next request a round trip after it, and on
// a VM whose idle vCPUs halt, waking a sleeping reader costs tens of
// microseconds: bench/rtt's GRAPH_RECOMPUTE + GET_TENSOR, 2-vCPU Zen 4 VM,
// took 57-72 us with a sleeping reader, 23-24 us with this. poll() rather
// than a non-blocking recv(): it does not take the socket's lock, which the
// arriving data needs.
constexpr std::chrono::microseconds kPollBeforeSleep{100};

// Returns once `fd` is readable (or closed) or kPollBeforeSleep has passed.
void PollBriefly(int fd) {
  pollfd readable = {fd, POLLIN, 0};
  SpinUntil([&] { return poll(&readable, 1, 0) != 0; }, kPollBeforeSleep);
}

}  // namespace

Socket::~Socket() { close(fd_); }

absl::Status Socket::Receive(char* data, size_t min, size_t max,
                             size_t wanted) {
  PollBriefly(fd_);
  size_t done = 0;
  while (done < min) {
    const ssize_t n = recv(fd_, data + done, max - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return absl::UnavailableError(
          absl::StrCat("connection closed with ", min - done, " of ", wanted,
                       " bytes still to read",
                       n < 0 ? absl::StrCat(" (", strerror(errno), ")") : ""));
    }
  }
  if (data == ahead_.data()) ahead_end_ = done;
  return absl::OkStatus();
}

// 1. Take what the read-ahead holds.
// 2. A rest smaller than the read-ahead refills it (reading as much as has
//    arrived); a larger rest is read into `data` directly.
absl::Status Socket::Read(void* data, size_t size) {
  if (size == 0) return absl::OkStatus();  // `data` may be null
  char* p = static_cast<char*>(data);
  const size_t buffered = std::min(size, ahead_end_ - ahead_begin_);
  std::memcpy(p, ahead_.data() + ahead_begin_, buffered);
  ahead_begin_ += buffered;
  const size_t rest = size - buffered;
  if (rest == 0) return absl::OkStatus();
  if (rest >= ahead_.size()) return Receive(p + buffered, rest, rest, size);
  ahead_begin_ = ahead_end_ = 0;
  if (absl::Status s = Receive(ahead_.data(), rest, ahead_.size(), size);
      !s.ok()) {
    return s;
  }
  std::memcpy(p + buffered, ahead_.data(), rest);
  ahead_begin_ = rest;
  return absl::OkStatus();
}

absl::Status Socket::Write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = send(fd_, p + done, size - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return absl::UnavailableError(absl::StrCat(
          "connection closed with ", size - done, " of ", size,
          " bytes still to write",
          n < 0 ? absl::StrCat(" (", strerror(errno), ")") : ""));
    }
  }
  return absl::OkStatus();
}

absl::Status Socket::WriteFrame(const void* data, size_t size) {
  const uint64_t size64 = size;
  // Small responses go out as one segment.
  char small[256];
  if (size <= sizeof(small) - sizeof(size64)) {
    std::memcpy(small, &size64, sizeof(size64));
    if (size > 0) std::memcpy(small + sizeof(size64), data, size);
    return Write(small, sizeof(size64) + size);
  }
  if (absl::Status s = Write(&size64, sizeof(size64)); !s.ok()) return s;
  return Write(data, size);
}

void Socket::Shutdown() { shutdown(fd_, SHUT_RDWR); }

std::string Socket::Peer() const {
  sockaddr_storage addr = {};
  socklen_t len = sizeof(addr);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return "unknown peer";
  }
  char host[NI_MAXHOST] = {};
  char port[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host),
                  port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown peer";
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<int> ListenTcp(const std::string& host_port, int& port) {
  const size_t colon = host_port.rfind(':');
  int port_number = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(host_port.substr(colon + 1), &port_number) ||
      port_number < 0 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml-rpc listen address \"", host_port,
                     "\": want HOST:PORT"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port_number);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(),
                  &hints, &found) != 0 ||
      found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ggml-rpc listen address \"", host_port, "\": unknown host"));
  }
  int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC,
                  found->ai_protocol);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) != 0 ||
      listen(fd, 64) != 0) {
    const std::string why = strerror(errno);
    if (fd >= 0) close(fd);
    freeaddrinfo(found);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host_port, " for ggml-rpc: ", why));
  }
  freeaddrinfo(found);
  sockaddr_storage bound = {};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port = ntohs(bound.ss_family == AF_INET6
                   ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

}  // namespace tessera::server::ggml_rpc
