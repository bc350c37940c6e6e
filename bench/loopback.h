#ifndef TESSERA_BENCH_LOOPBACK_H_
#define TESSERA_BENCH_LOOPBACK_H_

// Raw TCP over 127.0.0.1, the limit the transfer and round-trip benchmarks
// compare the daemon against: a server thread and a client socket with
// TCP_NODELAY, no framing beyond fixed sizes. Like the daemon, the server
// side owns memory that uploads land in and downloads come from, and the
// client side sends from and receives into the caller's memory, so both
// paths read and write the same number of bytes of memory.

#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::bench {

class Loopback {
 public:
  // Listens on an ephemeral port and connects to it. The server side owns
  // `server_bytes` of memory, written once before any timing.
  static absl::StatusOr<std::unique_ptr<Loopback>> Open(
      size_t server_bytes = 0);
  ~Loopback();

  // Seconds to send [data, data + bytes) into the server's memory at
  // `offset`; the server answers one byte once it has them all.
  absl::StatusOr<double> Upload(const void* data, size_t offset,
                                size_t bytes);
  // Seconds to receive the server's memory [offset, offset + bytes) into
  // `data`, after a request.
  absl::StatusOr<double> Download(void* data, size_t offset, size_t bytes);
  // How the server waits for each message of an exchange: asleep in recv,
  // or polling the socket without sleeping (as tesserad's ggml-rpc
  // connections do between requests).
  enum class Reader { kSleeps, kPolls };
  // Round trip times (seconds) of `n` exchanges: the client sends a
  // message of each of `sends` bytes (a send call each, as a protocol's
  // separate requests), the server reads them one by one and answers one
  // of `reply` bytes. A ping-pong of `size` bytes is ({size}, size).
  absl::StatusOr<std::vector<double>> Exchange(const std::vector<size_t>& sends,
                                               size_t reply, int n,
                                               Reader reader = Reader::kSleeps);
  // Restricts the server thread to `cpus` (see bench/cpu_pinning.h).
  absl::Status PinServer(const std::vector<int>& cpus);

 private:
  Loopback() = default;
  // The server's side of one command (the first byte of each exchange).
  void Serve();

  int listen_fd_ = -1;
  int client_fd_ = -1;
  int server_fd_ = -1;
  std::vector<char> server_memory_;
  std::thread server_;
};

// Median and 99th percentile of `samples` (sorted in place).
double Percentile(std::vector<double>& samples, double p);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_LOOPBACK_H_
