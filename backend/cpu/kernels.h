#ifndef TESSERA_BACKEND_CPU_KERNELS_H_
#define TESSERA_BACKEND_CPU_KERNELS_H_

// Row kernels of the CPU device, one table per SIMD level. The tables do no
// checking: callers (cpu_compute.cc and the op files it dispatches to) pass
// only valid, contiguous rows. Every function is thread-safe and touches only
// the memory it is given.

#include <cstddef>
#include <cstdint>

#include "backend/cpu/simd_level.h"

namespace tessera {

// Activations quantized for the integer dot products. A row of k floats
// (k a multiple of 32, nb = k / 32 blocks) becomes, in ActRowBytes(k) bytes:
//   int8 q[k] | float d[nb] | float s[nb]
// with x[i] ~= d[i / 32] * q[i] and s[b] = d[b] * (sum of block b's q).
inline size_t ActRowBytes(int64_t k) {
  const size_t bytes = static_cast<size_t>(k) + 8 * static_cast<size_t>(k / 32);
  return (bytes + 63) / 64 * 64;
}

// A product of quantized weights (Q8_0 or Q4_0 rows of k values; Q4_K,
// Q5_K or Q6_K rows with k a multiple of 256) and quantized activation
// rows: for r < rows and c < cols,
//   dst[c * dst_col_stride + r] = dot(weight row r, activation row c).
struct QuantMatMulArgs {
  const char* w;       // weight row 0
  size_t w_row_bytes;  // bytes between weight rows
  int64_t rows;
  const char* act;       // activation row 0 (ActRowBytes(k) apart)
  size_t act_row_bytes;  // ActRowBytes(k)
  int64_t cols;
  int64_t k;
  float* dst;
  int64_t dst_col_stride;  // floats between destination columns
};

enum class BinaryKind { kAdd, kSub, kMul, kDiv };

struct CpuKernels {
  SimdLevel level;
  // Quantizes `k` floats (k % 32 == 0) into one activation row.
  void (*quantize_act)(const float* x, char* row, int64_t k);
  void (*mul_mat_q8_0)(const QuantMatMulArgs& args);
  void (*mul_mat_q4_0)(const QuantMatMulArgs& args);
  // K-quant weights: every 32 activation values meet one Q4_K/Q5_K
  // sub-block or two Q6_K sub-blocks.
  void (*mul_mat_q4_k)(const QuantMatMulArgs& args);
  void (*mul_mat_q5_k)(const QuantMatMulArgs& args);
  void (*mul_mat_q6_k)(const QuantMatMulArgs& args);
  // Converts `n` F16 or BF16 values to F32.
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);
  void (*bf16_to_f32)(const uint16_t* x, float* y, int64_t n);
  // dst[i] = a[i] op b[i] for i < n (dst may alias a or b).
  void (*binary)(BinaryKind kind, const float* a, const float* b, float* dst,
                 int64_t n);
  // dst = x / sqrt(mean(x^2) + eps) (rms) or (x - mean) / sqrt(var + eps);
  // dst may alias x.
  void (*norm)(const float* x, float* dst, int64_t n, float eps, bool rms);
  // dst = softmax(x * scale + slope * mask); mask may be null; dst may alias
  // x.
  void (*soft_max)(const float* x, const float* mask, float* dst, int64_t n,
                   float scale, float slope);
  // Rotates the first 2 * pairs values of x by the pair angles (cos, sin
  // already scaled), NeoX pairs (i, i + pairs) or normal pairs (2i, 2i + 1),
  // and copies the rest of the n values; dst may alias x.
  void (*rope)(const float* x, float* dst, int64_t n, int64_t pairs,
               bool neox, const float* cos, const float* sin);
};

// The kernels of `level`; the caller makes sure the CPU supports it.
const CpuKernels& KernelsFor(SimdLevel level);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_KERNELS_H_
