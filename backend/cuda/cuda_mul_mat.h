#ifndef TESSERA_BACKEND_CUDA_CUDA_MUL_MAT_H_
#define TESSERA_BACKEND_CUDA_CUDA_MUL_MAT_H_

// MUL_MAT on the CUDA device.
//
// dst [m, n, b2, b3] = a [k, m, a2, a3] x b [k, n, b2, b3] (rows dotted),
// a broadcast over dims 2 and 3 (r2 = b2 / a2, r3 = b3 / a3):
//  1. One column per batch (n == 1): the MatVec kernels, reading a in its
//     own type (quantized blocks dequantized on the fly) and b as it lies;
//     for Q8_0, Q4_0 and Q4_K weights b is first rounded to 8-bit blocks
//     in scratch, as ggml's quantized products do.
//  2. Otherwise cuBLAS (cublasGemmStridedBatchedEx, fp32 accumulation):
//     - the compute type is a's for F32, F16 and BF16 (tensor cores for
//       the 16-bit types), F16 for the quantized types (32-value
//       blocks and K-quants), F32 for I32;
//     - a is used in place when it has that type and its rows are
//       contiguous with element-multiple strides, else it is converted
//       (dequantized) into scratch as a contiguous matrix;
//     - b is converted into scratch in the compute type unless that is F32
//       and b's layout is usable as it is;
//     - per b batch i3, one strided-batched GEMM over dim 2; with r2 > 1
//       the r2 b batches that share an a batch are one GEMM of n * r2
//       columns (b's batches then lie back to back).
// A k of 0 gives zeros.

#include <cstddef>

#include "absl/status/status.h"
#include "backend/cuda/cuda_compute.h"
#include "graph/tensor.h"

namespace tessera {

// Whether the GEMM's dimensions fit cuBLAS's 32-bit integers.
bool MulMatSupported(const Tensor& node);

// Scratch bytes for the converted operands, or for the MatVec path's
// rounded activations.
size_t MulMatScratchBytes(const Tensor& node);

// Queues the product. Errors: the launch or cuBLAS error naming the call.
absl::Status EnqueueMulMat(const CudaComputeContext& ctx, const Tensor& node);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_MUL_MAT_H_
