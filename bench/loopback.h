#ifndef TESSERA_BENCH_LOOPBACK_H_
#define TESSERA_BENCH_LOOPBACK_H_

// Raw TCP over 127.0.0.1, the limit the transfer and round-trip benchmarks
// compare the daemon against: a server thread and a client socket with
// TCP_NODELAY, no framing beyond fixed sizes.

#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::bench {

class Loopback {
 public:
  // Listens on an ephemeral port and connects to it.
  static absl::StatusOr<std::unique_ptr<Loopback>> Open();
  ~Loopback();

  // Seconds to send `bytes` to the server, which answers one byte once it
  // has them all.
  absl::StatusOr<double> Upload(size_t bytes);
  // Seconds to receive `bytes` from the server after a one-byte request.
  absl::StatusOr<double> Download(size_t bytes);
  // Round trip times (seconds) of `n` messages of `size` bytes echoed back.
  absl::StatusOr<std::vector<double>> PingPong(size_t size, int n);

 private:
  Loopback() = default;
  // The server's side of one command (the first byte of each exchange).
  void Serve();

  int listen_fd_ = -1;
  int client_fd_ = -1;
  int server_fd_ = -1;
  std::thread server_;
};

// Median and 99th percentile of `samples` (sorted in place).
double Percentile(std::vector<double>& samples, double p);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_LOOPBACK_H_
