#include "server/operations/metrics_http.h"

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "spdlog/spdlog.h"

namespace tessera::server {

// 1. Parse HOST:PORT (HOST may be [IPv6]).
// 2. Configure the server: /metrics, the 404 text, timeouts, the pool.
// 3. Bind (port 0: any), then run the accept loop on a thread.
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
  if (host.empty()) host = "0.0.0.0";

  auto server = std::make_unique<httplib::Server>();
  server->Get("/metrics", [render = std::move(render)](
                              const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server->set_error_handler(
      [](const httplib::Request&, httplib::Response& res) {
        res.set_content("only /metrics is here.\n", "text/plain");
      });
  const auto io = absl::ToChronoMicroseconds(kIoTimeout);
  server->set_read_timeout(io);
  server->set_write_timeout(io);
  server->set_keep_alive_timeout(absl::ToInt64Seconds(kIoTimeout));
  server->set_payload_max_length(8192);
  server->new_task_queue = [] { return new httplib::ThreadPool(kThreads); };

  const int bound = port == 0 ? server->bind_to_any_port(host)
                              : (server->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", listen));
  }
  return std::unique_ptr<MetricsHttp>(
      new MetricsHttp(std::move(server), bound));
}

MetricsHttp::MetricsHttp(std::unique_ptr<httplib::Server> server, int port)
    : server_(std::move(server)), port_(port) {
  thread_ = std::thread([this] {
    if (!server_->listen_after_bind()) {
      spdlog::error("metrics: the HTTP server on port {} stopped", port_);
    }
    stopped_ = true;
  });
  // stop() only ends a loop that runs: wait for it to start.
  while (!server_->is_running() && !stopped_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

MetricsHttp::~MetricsHttp() {
  server_->stop();
  thread_.join();
}

}  // namespace tessera::server
