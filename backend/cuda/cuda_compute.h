#ifndef TESSERA_BACKEND_CUDA_CUDA_COMPUTE_H_
#define TESSERA_BACKEND_CUDA_CUDA_COMPUTE_H_

// Kernel dispatch of the CUDA device: which nodes it computes, the checks
// that make a node safe to launch, and the launch itself.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "absl/status/status.h"
#include "backend/cuda/kernel_error.h"
#include "backend/cuda/kernels.h"
#include "graph/tensor.h"

namespace tessera {

class CudaDevice;

// What a node's kernels are queued with (owned by the stream).
struct CudaComputeContext {
  CudaDevice* device;
  cudaStream_t stream;
  cublasHandle_t cublas;
  // Device memory for intermediate values, at least CudaScratchBytes(node)
  // bytes, 256-byte aligned.
  void* scratch;
  size_t scratch_size;
  // The stream's kernel error record (device memory).
  cuda_kernels::KernelError* error;
};

// `t` as the kernels see it.
cuda_kernels::KTensor ToKTensor(const Tensor& t);

// Whether the CUDA kernels compute `node`: its op is in the enum (valid
// sub-ops for UNARY, GLU, ARGSORT), its type combination is one the
// reference kernels have, and its sizes fit the kernels (every ne[i] and
// row count below 2^31; ARGSORT rows up to kMaxArgsortCols; head sizes up
// to kMaxFlashAttnHead; a contiguous MUL_MAT result). Shapes are checked by
// CudaCheckNode. View ops and NONE are always supported.
bool CudaSupportsNode(const Tensor& node);

// Checks what the kernels rely on to stay inside every tensor's memory:
// CudaSupportsNode, CheckNode (graph/node_checks.h: operands present with
// data, types, shapes), and every operand's data and strides aligned to its
// element loads. Errors: INVALID_ARGUMENT, "[CUDA <OP>] <node>: <problem>".
absl::Status CudaCheckNode(const Tensor& node);

// Scratch bytes the node needs (MUL_MAT's converted operands,
// FLASH_ATTN_EXT's partial results), 0 for most.
size_t CudaScratchBytes(const Tensor& node);

// Queues the kernels of a supported, checked `node`. Errors: the launch or
// cuBLAS error naming the call (the stream makes it sticky).
absl::Status CudaEnqueueNode(const CudaComputeContext& ctx, const Tensor& node);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_COMPUTE_H_
