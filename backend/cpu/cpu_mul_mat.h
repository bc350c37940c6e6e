#ifndef TESSERA_BACKEND_CPU_CPU_MUL_MAT_H_
#define TESSERA_BACKEND_CPU_CPU_MUL_MAT_H_

// Fast MUL_MAT of the CPU device (ggml's semantics: dst[i1, i0] = dot(row
// i0 of src0, row i1 of src1), broadcast of src0 over dims 2 and 3):
//  - F32, F16 and BF16 src0 with at most kMaxMatVecCols src1 columns: the
//    level's float matrix-vector kernels, which read src0 once, converting
//    in registers, split over src0 rows.
//  - F32 src0 with more columns: OpenBLAS sgemm, one thread's rows per
//    call, OpenBLAS itself single-threaded (the device's team is the
//    parallelism).
//  - F16 and BF16 src0 with more columns: bands of rows converted to F32
//    in scratch memory, then sgemm.
//  - Quantized src0 (the 32-value blocks Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and
//    the K-quants Q2_K to Q6_K): src1 quantized to 8 bits in scratch
//    memory (all threads, then a barrier), one scale per 32 values for the
//    32-value blocks (ActRowBytes) and per 256 for the K-quants
//    (KActRowBytes), then integer dot products of the level's kernels,
//    split over src0 rows.
//  - BF16, F16, Q8_0 and Q4_0 src0 with at least kMinTileCols src1
//    columns, at a level with tile units (AMX): src1 quantized as above
//    (Q8_0, Q4_0) or rounded to BF16 (BF16, F16), packed in groups of
//    kTileCols columns in scratch memory (all threads, then a barrier),
//    then the level's tile products, split over src0 rows. F16 weights are
//    multiplied exactly; src1 rounded to BF16 is as ggml's BF16 products
//    round it.

#include <cstddef>

#include "backend/cpu/cpu_compute.h"
#include "backend/cpu/kernels.h"
#include "graph/tensor.h"

namespace tessera {

// Scratch bytes TryMulMat needs for `node` on `nth` threads with the
// kernels of `kernels` (0 when it does not take a fast path).
size_t MulMatWorkSize(const Tensor& node, int nth, const CpuKernels& kernels);

// Computes part ctx.ith of `node` and returns true when a fast path fits it
// (F32 operands, rows contiguous, strides BLAS accepts, shapes consistent,
// k a multiple of a quantized src0's block size); returns false, having done
// nothing, otherwise. Every thread of the team gets the same answer.
bool TryMulMat(Tensor& node, const CpuComputeContext& ctx);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_MUL_MAT_H_
