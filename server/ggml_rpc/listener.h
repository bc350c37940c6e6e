#ifndef TESSERA_SERVER_GGML_RPC_LISTENER_H_
#define TESSERA_SERVER_GGML_RPC_LISTENER_H_

#include <cstddef>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/ggml_rpc/connection.h"
#include "server/ggml_rpc/content_cache.h"

namespace tessera::server::ggml_rpc {

// The ggml-rpc listener: accepts TCP connections and serves each on a
// thread of its own (server/ggml_rpc/connection.h), at most
// `max_connections` at once; a connection over the cap is closed as soon
// as it is accepted, with a warning. Threads of ended connections are
// joined by the accept loop, so at most max_connections + 1 threads exist.
class Listener {
 public:
  struct Options {
    std::string listen;            // HOST:PORT
    size_t max_connections = 16;
    std::string cache_dir;         // empty: no content cache
  };

  // Binds `options.listen` and starts accepting. `shared`'s members must
  // outlive the listener. Errors: as ListenTcp.
  static absl::StatusOr<std::unique_ptr<Listener>> Start(
      const Options& options, const Shared& shared);
  // Stops accepting, ends every connection (their sessions close) and
  // joins the threads.
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  int port() const { return port_; }

 private:
  struct Served {
    std::unique_ptr<Connection> connection;
    std::thread thread;
    bool done = false;
  };

  Listener(const Options& options, const Shared& shared, int fd, int port);
  void AcceptLoop();
  // Joins the threads of ended connections.
  void Reap() ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const size_t max_connections_;
  std::unique_ptr<ContentCache> cache_;
  Shared shared_;
  const int fd_;
  const int port_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Served> served_ ABSL_GUARDED_BY(mu_);

  std::thread accept_;
};

}  // namespace tessera::server::ggml_rpc

#endif  // TESSERA_SERVER_GGML_RPC_LISTENER_H_
