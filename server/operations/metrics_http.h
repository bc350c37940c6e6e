#ifndef TESSERA_SERVER_OPERATIONS_METRICS_HTTP_H_
#define TESSERA_SERVER_OPERATIONS_METRICS_HTTP_H_

// The HTTP server for Prometheus (cpp-httplib): GET /metrics answers with
// the text `render` returns; anything else is 404. Connections are served
// by a fixed pool of kThreads threads, each read and write giving up after
// kIoTimeout, so a slow or stalled client holds one of them for a while
// and never blocks the scrapes of others.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace tessera::server {

class MetricsHttp {
 public:
  static constexpr int kThreads = 4;
  static constexpr absl::Duration kIoTimeout = absl::Seconds(2);

  // Listens on `listen` (HOST:PORT, port 0 picks one). Errors:
  // INVALID_ARGUMENT for an address that does not parse; UNAVAILABLE when it
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttp>> Start(
      const std::string& listen, std::function<std::string()> render);
  // Stops serving and joins the threads.
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttp(std::unique_ptr<httplib::Server> server, int port);

  const std::unique_ptr<httplib::Server> server_;
  const int port_;
  std::atomic<bool> stopped_{false};  // the accept loop has returned
  std::thread thread_;                // runs the accept loop
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_METRICS_HTTP_H_
