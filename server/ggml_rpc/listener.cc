#include "server/ggml_rpc/listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera::server::ggml_rpc {

absl::StatusOr<std::unique_ptr<Listener>> Listener::Start(
    const Options& options, const Shared& shared) {
  int port = 0;
  TESSERA_ASSIGN_OR_RETURN(const int fd, ListenTcp(options.listen, port));
  std::unique_ptr<Listener> listener(
      new Listener(options, shared, fd, port));
  listener->accept_ = std::thread([l = listener.get()] { l->AcceptLoop(); });
  return listener;
}

Listener::Listener(const Options& options, const Shared& shared, int fd,
                   int port)
    : max_connections_(options.max_connections),
      cache_(options.cache_dir.empty()
                 ? nullptr
                 : std::make_unique<ContentCache>(options.cache_dir)),
      shared_(shared),
      fd_(fd),
      port_(port) {
  shared_.cache = cache_.get();
}

Listener::~Listener() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (Served& s : served_) {
      if (s.connection != nullptr) s.connection->Shutdown();
    }
  }
  shutdown(fd_, SHUT_RDWR);
  accept_.join();
  close(fd_);
  // The accept loop has stopped: no new entries.
  std::list<Served> served;
  {
    absl::MutexLock lock(&mu_);
    served.swap(served_);
  }
  for (Served& s : served) s.thread.join();
}

void Listener::Reap() {
  std::list<Served> done;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = served_.begin(); it != served_.end();) {
      auto next = std::next(it);
      if (it->done) done.splice(done.end(), served_, it);
      it = next;
    }
  }
  for (Served& s : done) s.thread.join();
}

// 1. Wait for a connection (poll with a timeout, so ended connections are
//    reaped while idle).
// 2. Reap again (a connection may have ended while the loop waited), then
//    refuse it over the cap; otherwise serve it on its own thread, which
//    marks itself done at the end.
void Listener::AcceptLoop() {
  while (true) {
    Reap();
    pollfd p = {fd_, POLLIN, 0};
    const int ready = poll(&p, 1, 1000);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    if (ready <= 0) continue;
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      spdlog::warn("[ggml-rpc] accept: {}", strerror(errno));
      continue;
    }
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto socket = std::make_unique<Socket>(client);
    Reap();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (served_.size() >= max_connections_) {
      spdlog::warn("[ggml-rpc] {}: refused, {} connections already "
                   "(--ggml_rpc_max_connections)",
                   socket->Peer(), served_.size());
      continue;  // closes the socket
    }
    served_.push_back(Served{
        std::make_unique<Connection>(shared_, std::move(socket))});
    Served* s = &served_.back();
    s->thread = std::thread([this, s] {
      s->connection->Serve();
      std::unique_ptr<Connection> ended;
      {
        absl::MutexLock lock(&mu_);
        ended = std::move(s->connection);
        s->done = true;
      }
      // Closes the socket and the session outside the lock.
    });
  }
}

}  // namespace tessera::server::ggml_rpc
