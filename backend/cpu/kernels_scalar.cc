// The portable kernels (SimdLevel::kScalar): any CPU.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_levels.h"
#include "graph/block_quant.h"
#include "graph/kquant.h"
#include "graph/type.h"

namespace tessera::cpu_scalar {
namespace {

#include "backend/cpu/kernels_generic.inc"

void F16ToF32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Fp16ToFp32(x[i]);
}

void F32ToF16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Fp32ToFp16(x[i]);
}

// Integer dot product of one weight block and one activation block (levels
// q, scale d, s = d * sum(q)), scaled: the block's contribution to the row
// dot product.
template <typename Block>
float BlockDot(const Block& blk, const int8_t* q, float d, float s);

template <>
float BlockDot(const BlockQ8_0& blk, const int8_t* q, float d, float) {
  int sum = 0;
  for (int i = 0; i < 32; ++i) sum += blk.qs[i] * q[i];
  return Fp16ToFp32(blk.d) * d * static_cast<float>(sum);
}

// The integer dot product of 32 levels less `offset` and an activation
// block.
int LevelDot(const uint8_t* levels, int offset, const int8_t* q) {
  int sum = 0;
  for (int i = 0; i < 32; ++i) sum += (levels[i] - offset) * q[i];
  return sum;
}

template <>
float BlockDot(const BlockQ4_0& blk, const int8_t* q, float d, float) {
  uint8_t levels[32];
  UnpackBlockLevels(blk.qs, nullptr, levels);
  return Fp16ToFp32(blk.d) * d * static_cast<float>(LevelDot(levels, 8, q));
}

template <>
float BlockDot(const BlockQ5_0& blk, const int8_t* q, float d, float) {
  uint8_t levels[32];
  UnpackBlockLevels(blk.qs, blk.qh, levels);
  return Fp16ToFp32(blk.d) * d * static_cast<float>(LevelDot(levels, 16, q));
}

template <>
float BlockDot(const BlockQ4_1& blk, const int8_t* q, float d, float s) {
  uint8_t levels[32];
  UnpackBlockLevels(blk.qs, nullptr, levels);
  return Fp16ToFp32(blk.d) * d * static_cast<float>(LevelDot(levels, 0, q)) +
         Fp16ToFp32(blk.m) * s;
}

template <>
float BlockDot(const BlockQ5_1& blk, const int8_t* q, float d, float s) {
  uint8_t levels[32];
  UnpackBlockLevels(blk.qs, blk.qh, levels);
  return Fp16ToFp32(blk.d) * d * static_cast<float>(LevelDot(levels, 0, q)) +
         Fp16ToFp32(blk.m) * s;
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
      for (int64_t b = 0; b < nb; ++b) {
        sum += BlockDot(w[b], q + 32 * b, d[b], d[nb + b]);
      }
      a.dst[c * a.dst_col_stride + r] = sum;
    }
  }
}

// One K-quant super-block in integer form: the unsigned level of each of
// its 256 values and, per group g of 16 values, an integer scale and an
// integer offset, so that value i = d * scale[i / 16] * level[i]
// - f * offset[i / 16]. Q4_K and Q5_K: scale and min of each sub-block of
// 32, f = dmin; Q6_K: its levels biased by 32, offset = 32 * scale, f = d.
struct KSuper {
  uint8_t level[kQK_K];
  int16_t scale[kQK_K / 16];
  int16_t offset[kQK_K / 16];
  float d;
  float f;
};

void AffineScales(uint16_t d16, uint16_t dmin16, const uint8_t* scales,
                  KSuper& u) {
  u.d = Fp16ToFp32(d16);
  u.f = Fp16ToFp32(dmin16);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    UnpackKScaleMin(scales, j, &sc, &m);
    u.scale[2 * j] = u.scale[2 * j + 1] = static_cast<int16_t>(sc);
    u.offset[2 * j] = u.offset[2 * j + 1] = static_cast<int16_t>(m);
  }
}

void Unpack(const BlockQ4_K& b, KSuper& u) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      u.level[64 * c + l] = b.qs[32 * c + l] & 0x0F;
      u.level[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
    }
  }
  AffineScales(b.d, b.dmin, b.scales, u);
}

void Unpack(const BlockQ5_K& b, KSuper& u) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo =
          (b.qs[32 * c + l] & 0x0F) | (((b.qh[l] >> (2 * c)) & 1) << 4);
      const int hi =
          (b.qs[32 * c + l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4);
      u.level[64 * c + l] = static_cast<uint8_t>(lo);
      u.level[64 * c + 32 + l] = static_cast<uint8_t>(hi);
    }
  }
  AffineScales(b.d, b.dmin, b.scales, u);
}

void Unpack(const BlockQ6_K& b, KSuper& u) {
  for (int h = 0; h < 2; ++h) {
    for (int t = 0; t < 4; ++t) {
      for (int l = 0; l < 32; ++l) {
        const int lo =
            (b.ql[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 0x0F;
        const int hi = (b.qh[32 * h + l] >> (2 * t)) & 3;
        u.level[128 * h + 32 * t + l] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
  u.d = u.f = Fp16ToFp32(b.d);
  for (int g = 0; g < 16; ++g) {
    u.scale[g] = b.scales[g];
    u.offset[g] = static_cast<int16_t>(32 * b.scales[g]);
  }
}

// Q2_K and Q3_K: two bits of value 128h + 32j + l in bits 2j of
// qs[32h + l]; Q3_K's third bit is bit 4h + j of hmask[l].
void Unpack(const BlockQ2_K& b, KSuper& u) {
  for (int v = 0; v < kQK_K; ++v) {
    u.level[v] = static_cast<uint8_t>(
        (b.qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3);
  }
  u.d = Fp16ToFp32(b.d);
  u.f = Fp16ToFp32(b.dmin);
  for (int g = 0; g < 16; ++g) {
    u.scale[g] = static_cast<int16_t>(b.scales[g] & 0x0F);
    u.offset[g] = static_cast<int16_t>(b.scales[g] >> 4);
  }
}

void Unpack(const BlockQ3_K& b, KSuper& u) {
  for (int v = 0; v < kQK_K; ++v) {
    const int h = v / 128, j = (v % 128) / 32, l = v % 32;
    const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
    const int high = (b.hmask[l] >> (4 * h + j)) & 1;
    u.level[v] = static_cast<uint8_t>(low | (high << 2));
  }
  u.d = u.f = Fp16ToFp32(b.d);
  for (int g = 0; g < 16; ++g) {
    const int scale = UnpackQ3KScale(b.scales, g) - 32;
    u.scale[g] = static_cast<int16_t>(scale);
    u.offset[g] = static_cast<int16_t>(4 * scale);
  }
}

// Per super-block i against activation scale da and group sums s:
//   da * (d * sum_g scale[g] * dot(group g) - f * sum_g offset[g] * s[g]).
template <typename Block>
void MulMatKQuant(const QuantMatMulArgs& a) {
  const int64_t nsb = a.k / kQK_K;
  KSuper u;
  for (int64_t r = 0; r < a.rows; ++r) {
    const Block* w = reinterpret_cast<const Block*>(a.w + r * a.w_row_bytes);
    for (int64_t c = 0; c < a.cols; ++c) a.dst[c * a.dst_col_stride + r] = 0.0f;
    for (int64_t i = 0; i < nsb; ++i) {
      Unpack(w[i], u);
      for (int64_t c = 0; c < a.cols; ++c) {
        const char* act = a.act + c * a.act_row_bytes;
        const int8_t* q = reinterpret_cast<const int8_t*>(act) + i * kQK_K;
        const float* d = reinterpret_cast<const float*>(act + a.k);
        const int16_t* s =
            reinterpret_cast<const int16_t*>(d + nsb) + i * (kQK_K / 16);
        int32_t dot = 0;
        int32_t offset = 0;
        for (int g = 0; g < 16; ++g) {
          int32_t group = 0;
          for (int l = 16 * g; l < 16 * g + 16; ++l) group += u.level[l] * q[l];
          dot += u.scale[g] * group;
          offset += u.offset[g] * s[g];
        }
        a.dst[c * a.dst_col_stride + r] +=
            d[i] * (u.d * static_cast<float>(dot) -
                    u.f * static_cast<float>(offset));
      }
    }
  }
}

// Weight element readers of the float products.
struct F32Weights {
  using T = float;
  static float One(T v) { return v; }
};
struct F16Weights {
  using T = uint16_t;
  static float One(T v) { return Fp16ToFp32(v); }
};
struct BF16Weights {
  using T = uint16_t;
  static float One(T v) {
    return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
  }
};

// The attention block one query at a time, with the readers KW and VW of
// the key and value types (KW::One converts one value).
struct Attn {
  using F32 = F32Weights;
  using F16 = F16Weights;
  using BF16 = BF16Weights;

  template <typename KW, typename VW>
  static void Run(const AttnBlockArgs& a) {
    for (int64_t i = 0; i < a.nq; ++i) {
      const float* q = a.q + i * a.d;
      float* s = a.scores + i * a.n;
      for (int64_t j = 0; j < a.n; ++j) {
        const typename KW::T* k = AttnRow<KW>(a.k, a.k_stride, j);
        float part[kLanes] = {};
        int64_t t = 0;
        for (; t + kLanes <= a.d; t += kLanes) {
          for (int l = 0; l < kLanes; ++l) {
            part[l] += q[t + l] * AttnOne<KW>(k, t + l);
          }
        }
        float sum = 0.0f;
        for (int l = 0; l < kLanes; ++l) sum += part[l];
        for (; t < a.d; ++t) sum += q[t] * AttnOne<KW>(k, t);
        s[j] = sum;
      }
      if (!AttnWeights(a, i, s)) continue;
      float* acc = a.acc + i * a.dv;
      for (int64_t j = 0; j < a.n; ++j) {
        const float p = s[j];
        if (p == 0.0f) continue;  // excluded, or too small to count
        const typename VW::T* v = AttnRow<VW>(a.v, a.v_stride, j);
        for (int64_t t = 0; t < a.dv; ++t) acc[t] += p * AttnOne<VW>(v, t);
      }
    }
  }
};

template <typename W>
void MatVec(const FloatMatVecArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const auto* w =
        reinterpret_cast<const typename W::T*>(a.w + r * a.w_row_bytes);
    for (int64_t c = 0; c < a.cols; ++c) {
      const float* x = a.x + c * a.x_col_stride;
      float part[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= a.k; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) part[l] += W::One(w[i + l]) * x[i + l];
      }
      float sum = 0.0f;
      for (int l = 0; l < kLanes; ++l) sum += part[l];
      for (; i < a.k; ++i) sum += W::One(w[i]) * x[i];
      a.dst[c * a.dst_col_stride + r] = sum;
    }
  }
}

}  // namespace

const CpuKernels kKernels = {
    .level = SimdLevel::kScalar,
    .quantize_act = QuantizeActGeneric,
    .quantize_act_k = QuantizeActKGeneric,
    .mul_mat_q8_0 = MulMatQuant<BlockQ8_0>,
    .mul_mat_q4_0 = MulMatQuant<BlockQ4_0>,
    .mul_mat_q4_1 = MulMatQuant<BlockQ4_1>,
    .mul_mat_q5_0 = MulMatQuant<BlockQ5_0>,
    .mul_mat_q5_1 = MulMatQuant<BlockQ5_1>,
    .mul_mat_q2_k = MulMatKQuant<BlockQ2_K>,
    .mul_mat_q3_k = MulMatKQuant<BlockQ3_K>,
    .mul_mat_q4_k = MulMatKQuant<BlockQ4_K>,
    .mul_mat_q5_k = MulMatKQuant<BlockQ5_K>,
    .mul_mat_q6_k = MulMatKQuant<BlockQ6_K>,
    .mat_vec_f32 = MatVec<F32Weights>,
    .mat_vec_f16 = MatVec<F16Weights>,
    .mat_vec_bf16 = MatVec<BF16Weights>,
    .attn_block = AttnByTypes<Attn>,
    .f16_to_f32 = F16ToF32,
    .bf16_to_f32 = Bf16ToF32Generic,
    .q8_0_to_f32 = Q8_0ToF32Generic,
    .q4_0_to_f32 = Q4_0ToF32Generic,
    .q4_1_to_f32 = BlockToF32Generic<BlockQ4_1, false, true>,
    .q5_0_to_f32 = BlockToF32Generic<BlockQ5_0, true, false>,
    .q5_1_to_f32 = BlockToF32Generic<BlockQ5_1, true, true>,
    .f32_to_f16 = F32ToF16,
    .f32_to_bf16 = F32ToBf16Generic,
    .binary = BinaryGeneric,
    .act = ActGeneric,
    .norm = NormGeneric,
    .soft_max = SoftMaxGeneric,
    .rope = RopeRows<RopeRowGeneric>,
};

}  // namespace tessera::cpu_scalar
