#ifndef TESSERA_BENCH_TCP_PING_PONG_H_
#define TESSERA_BENCH_TCP_PING_PONG_H_

// The plainest round trip over 127.0.0.1: an echo thread and a client
// thread, TCP_NODELAY on both sockets, one blocking send and one blocking
// receive of `size` bytes each way per sample.

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::bench {

// Round trip times (seconds) of `n` messages of `size` bytes, after a
// warm-up of n / 10.
absl::StatusOr<std::vector<double>> TcpPingPong(size_t size, int n);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_TCP_PING_PONG_H_
