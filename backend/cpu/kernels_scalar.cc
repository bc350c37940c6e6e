// The portable kernels (SimdLevel::kScalar): any CPU.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_levels.h"
#include "graph/type.h"

namespace tessera::cpu_scalar {
namespace {

#include "backend/cpu/kernels_generic.inc"

void F16ToF32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Fp16ToFp32(x[i]);
}

// Integer dot product of one weight block (values w) and one activation
// block, scaled: the block's contribution to the row dot product.
template <typename Block>
float BlockDot(const Block& blk, const int8_t* q, float d);

template <>
float BlockDot(const BlockQ8_0& blk, const int8_t* q, float d) {
  int sum = 0;
  for (int i = 0; i < 32; ++i) sum += blk.qs[i] * q[i];
  return Fp16ToFp32(blk.d) * d * static_cast<float>(sum);
}

template <>
float BlockDot(const BlockQ4_0& blk, const int8_t* q, float d) {
  int sum = 0;
  for (int i = 0; i < 16; ++i) {
    sum += ((blk.qs[i] & 0x0F) - 8) * q[i];
    sum += ((blk.qs[i] >> 4) - 8) * q[i + 16];
  }
  return Fp16ToFp32(blk.d) * d * static_cast<float>(sum);
}

template <typename Block>
void MulMatQuant(const QuantMatMulArgs& a) {
  const int64_t nb = a.k / 32;
  for (int64_t c = 0; c < a.cols; ++c) {
    const char* act = a.act + c * a.act_row_bytes;
    const int8_t* q = reinterpret_cast<const int8_t*>(act);
    const float* d = reinterpret_cast<const float*>(act + a.k);
    for (int64_t r = 0; r < a.rows; ++r) {
      const Block* w = reinterpret_cast<const Block*>(a.w + r * a.w_row_bytes);
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) sum += BlockDot(w[b], q + 32 * b, d[b]);
      a.dst[c * a.dst_col_stride + r] = sum;
    }
  }
}

}  // namespace

const CpuKernels kKernels = {
    .level = SimdLevel::kScalar,
    .quantize_act = QuantizeActGeneric,
    .mul_mat_q8_0 = MulMatQuant<BlockQ8_0>,
    .mul_mat_q4_0 = MulMatQuant<BlockQ4_0>,
    .f16_to_f32 = F16ToF32,
    .bf16_to_f32 = Bf16ToF32Generic,
    .binary = BinaryGeneric,
    .norm = NormGeneric,
    .soft_max = SoftMaxGeneric,
    .rope = RopeGeneric,
};

}  // namespace tessera::cpu_scalar
