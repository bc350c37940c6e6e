#ifndef TESSERA_BACKEND_CUDA_CUDA_GRAPH_CACHE_H_
#define TESSERA_BACKEND_CUDA_CUDA_GRAPH_CACHE_H_

#include <cuda_runtime.h>

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "backend/cuda/cuda_handles.h"
#include "graph/tensor.h"

namespace tessera {

class CudaDevice;

// Replays a graph that a stream computes unchanged several times in a row
// as a CUDA graph, so that its kernels launch with one call.
//
// Run(nodes, enqueue):
//  1. Builds the signature of `nodes`: every node's op, type, shape,
//     strides, op_params and data address, and the same of its sources,
//     plus the `extra` addresses the kernels use (the stream's scratch).
//  2. A signature other than the previous one drops the cached graph and
//     starts counting again; `enqueue` queues the kernels directly.
//  3. On the kCaptureAfter-th identical call in a row, the kernels that
//     `enqueue` queues are captured (thread-local capture mode) into a CUDA
//     graph, which is instantiated and launched. If the capture or the
//     instantiation fails, this signature is never captured again and
//     `enqueue` runs directly.
//  4. Later identical calls launch the instantiated graph.
// Data addresses are in the signature, so new tensor contents (inputs
// written between calls) are read by the replay; new shapes or placements
// are a new signature. Not thread-safe: one stream, one thread at a time.
class CudaGraphCache {
 public:
  static constexpr int kCaptureAfter = 3;

  explicit CudaGraphCache(CudaDevice& device);
  CudaGraphCache(const CudaGraphCache&) = delete;
  CudaGraphCache& operator=(const CudaGraphCache&) = delete;

  // Errors: those of `enqueue`, and CUDA errors of launching the graph.
  absl::Status Run(cudaStream_t stream, absl::Span<const Tensor* const> nodes,
                   absl::Span<const void* const> extra,
                   absl::FunctionRef<absl::Status()> enqueue);
  // Drops the cached graph (its addresses are about to become invalid).
  void Clear();

  // Whether a captured graph is ready to replay (for tests and metrics).
  bool has_graph() const { return static_cast<bool>(exec_); }

 private:
  absl::Status Capture(cudaStream_t stream,
                       absl::FunctionRef<absl::Status()> enqueue);

  CudaDevice& device_;
  std::string signature_;
  int repeats_ = 0;
  bool capture_failed_ = false;
  CudaGraphExecHandle exec_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_GRAPH_CACHE_H_
