#ifndef TESSERA_BENCH_GGML_RPC_BENCH_H_
#define TESSERA_BENCH_GGML_RPC_BENCH_H_

// tesserad's ggml-rpc listener as llama.cpp's RPC backend uses it, through
// the protocol client of tests/ggml_rpc: the reused-graph round trip and
// tensor transfers.

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/ggml_rpc/ggml_rpc_client.h"

namespace tessera::bench {

// Round trips (seconds) of llama.cpp's reused-graph path: GRAPH_RECOMPUTE
// of a 1-op graph (ADD of two 16-float tensors) then GET_TENSOR of its 64
// bytes, after one GRAPH_COMPUTE; `n` samples after a warm-up of n / 10.
absl::StatusOr<std::vector<double>> GgmlRpcRecompute(int port, int n);

// The sizes in bytes of that round trip's two requests and of its reply,
// for raw TCP to exchange the same (Loopback::Exchange).
struct RecomputeBytes {
  std::vector<size_t> requests;
  size_t reply = 0;
};
RecomputeBytes GgmlRpcRecomputeBytes();

// SET_TENSOR and GET_TENSOR into one buffer of a connection.
class GgmlRpcTransfer {
 public:
  static absl::StatusOr<std::unique_ptr<GgmlRpcTransfer>> Open(int port,
                                                               size_t bytes);
  // Seconds to send [data, data + bytes) to the buffer at `offset`, until
  // a following round trip (DEVICE_COUNT) says the server has them.
  absl::StatusOr<double> Upload(const void* data, size_t offset,
                                size_t bytes);
  // Seconds to receive the buffer's [offset, offset + bytes) into `data`.
  absl::StatusOr<double> Download(void* data, size_t offset, size_t bytes);

 private:
  GgmlRpcTransfer(std::unique_ptr<testing::GgmlRpcClient> client,
                  testing::GgmlRpcClient::Allocation buffer)
      : client_(std::move(client)), buffer_(buffer) {}
  testing::GgmlTensor At(size_t offset, size_t bytes) const;

  std::unique_ptr<testing::GgmlRpcClient> client_;
  testing::GgmlRpcClient::Allocation buffer_;
};

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_GGML_RPC_BENCH_H_
