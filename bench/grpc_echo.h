#ifndef TESSERA_BENCH_GRPC_ECHO_H_
#define TESSERA_BENCH_GRPC_ECHO_H_

// The cheapest round trip gRPC offers here, the floor under any gRPC
// service's round trip: an in-process server on 127.0.0.1 whose callback
// handler echoes each message of a bidirectional stream, and a synchronous
// client stream that sends a message and reads its echo, the way
// client::RemoteGraph drives Execute.

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::bench {

// Round trip times (seconds) of `n` messages of `size` bytes, after a
// warm-up, over one open stream.
absl::StatusOr<std::vector<double>> GrpcEcho(size_t size, int n);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_GRPC_ECHO_H_
