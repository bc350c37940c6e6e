#ifndef TESSERA_SERVER_OPERATIONS_METRICS_HTTP_H_
#define TESSERA_SERVER_OPERATIONS_METRICS_HTTP_H_

// A minimal HTTP/1.1 server for Prometheus: GET /metrics answers with the
// text `render` returns; anything else is 404. One thread, one request per
// connection.

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace tessera::server {

class MetricsHttp {
 public:
  // Listens on `listen` (HOST:PORT, port 0 picks one). Errors:
  // INVALID_ARGUMENT for an address that does not parse; UNAVAILABLE when it
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttp>> Start(
      const std::string& listen, std::function<std::string()> render);
  // Stops serving and closes the socket.
  ~MetricsHttp();
  MetricsHttp(const MetricsHttp&) = delete;
  MetricsHttp& operator=(const MetricsHttp&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttp(int fd, int port, std::function<std::string()> render);
  void Serve();
  void Answer(int client);

  const int fd_;
  const int port_;
  const std::function<std::string()> render_;
  int wake_[2] = {-1, -1};  // a pipe that ends Serve
  std::thread thread_;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_METRICS_HTTP_H_
