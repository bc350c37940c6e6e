#ifndef TESSERA_BACKEND_CPU_KERNELS_H_
#define TESSERA_BACKEND_CPU_KERNELS_H_

// Row kernels of the CPU device, one table per SIMD level. The tables do no
// checking: callers (cpu_compute.cc and the op files it dispatches to) pass
// only valid, contiguous rows. Every function is thread-safe and touches only
// the memory it is given.

#include <cstddef>
#include <cstdint>

#include "backend/cpu/simd_level.h"
#include "graph/type.h"

namespace tessera {

// How far ahead of their reads the mat-vec kernels prefetch their weight
// streams, into the outer caches (see kernels_generic.inc).
inline constexpr int64_t kWeightPrefetchBytes = 16384;

// Asks the outer caches (every level but L1) for the cache lines that hold
// bytes [p, p + bytes).
inline void PrefetchBytes(const void* p, int64_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t line = begin & ~uintptr_t{63};
       line < begin + static_cast<uintptr_t>(bytes); line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 2);
  }
}

// Activations quantized for the products of 32-value blocks (Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1). A row of k floats
// (k a multiple of 32, nb = k / 32 blocks) becomes, in ActRowBytes(k) bytes:
//   int8 q[k] | float d[nb] | float s[nb]
// with x[i] ~= d[i / 32] * q[i] and s[b] = d[b] * (sum of block b's q).
inline size_t ActRowBytes(int64_t k) {
  const size_t bytes = static_cast<size_t>(k) + 8 * static_cast<size_t>(k / 32);
  return (bytes + 63) / 64 * 64;
}

// Activations quantized for the K-quant products, one scale per 256 values
// so that a super-block's sub-block sums stay integers. A row of k floats
// (k a multiple of 256, ns = k / 256) becomes, in KActRowBytes(k) bytes:
//   int8 q[k] | float d[ns] | int16 s[k / 16]
// with x[i] ~= d[i / 256] * q[i] and s[g] = the sum of q[16g .. 16g + 15].
inline size_t KActRowBytes(int64_t k) {
  const size_t n = static_cast<size_t>(k);
  const size_t bytes = n + 4 * (n / 256) + 2 * (n / 16);
  return (bytes + 63) / 64 * 64;
}

// A product of quantized weights and quantized activation rows: rows of
// 32-value blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) of k values with
// ActRowBytes rows; K-quant (Q2_K to Q6_K) rows
// (k a multiple of 256) with KActRowBytes rows. For r < rows and c < cols,
//   dst[c * dst_col_stride + r] = dot(weight row r, activation row c).
struct QuantMatMulArgs {
  const char* w;       // weight row 0
  size_t w_row_bytes;  // bytes between weight rows
  int64_t rows;
  const char* act;       // activation row 0
  size_t act_row_bytes;  // ActRowBytes(k) or KActRowBytes(k)
  int64_t cols;
  int64_t k;
  float* dst;
  int64_t dst_col_stride;  // floats between destination columns
};

// Products of weights of BF16, F16, Q8_0 or Q4_0 and src1 of at least
// kMinTileCols columns, at levels that have them: BF16 weights by
// AVX512-BF16's pair products (SimdLevel::kAvx512Bf16), all four on the
// tile units (AMX; SimdLevel::kAmx). The columns are first packed in
// groups of kTileCols (the last zero-padded), each group into
// TileGroupBytes(type, k) bytes (k a multiple of 32):
//  - BF16 and F16 weights: the columns rounded to BF16, a tile of 32
//    values of 16 columns (16 rows of 64 bytes) after another (F16 weights
//    are multiplied exactly, as the sum of two BF16 values);
//  - Q8_0 and Q4_0 weights: quantized activation rows (ActRowBytes)
//    regrouped the same way, four values to a word, a tile of 8 x 64 bytes
//    and the 16 columns' scales per 32-value block.
// Then, for r < rows and c < cols,
//   dst[c * dst_col_stride + r] = dot(weight row r, column c)
// with each thread's scratch of TileScratchBytes(type, k) bytes.
inline constexpr int64_t kTileCols = 16;
inline constexpr int64_t kMinTileCols = 16;

inline size_t TileGroupBytes(Type type, int64_t k) {
  const size_t n = static_cast<size_t>(k);
  return type == Type::kBF16 || type == Type::kF16 ? n * 2 * kTileCols
                                                    : (n / 32) * (512 + 64);
}

inline size_t TileScratchBytes(Type type, int64_t k) {
  const size_t n = static_cast<size_t>(k);
  // A band of weights in the tile units' layout (BF16: 32 rows, two 1 KiB
  // tiles per 32 values; F16: four, its hi and lo parts; quantized: 16
  // rows, a 512-byte tile and 16 F32 scales per block), then four 1 KiB
  // tiles of results.
  const size_t per_block = type == Type::kBF16  ? 2048
                           : type == Type::kF16 ? 4096
                                                : 512 + 64;
  return (n / 32) * per_block + 4096;
}

struct TileGemmArgs {
  const char* w;       // weight row 0
  size_t w_row_bytes;  // bytes between weight rows
  int64_t rows;
  const char* packed;  // the column groups, TileGroupBytes apart
  int64_t cols;
  int64_t k;
  float* dst;
  int64_t dst_col_stride;  // floats between destination columns
  char* scratch;           // TileScratchBytes, 64-byte aligned
};

// Most activation columns a float matrix-vector product takes at once.
inline constexpr int64_t kMaxMatVecCols = 8;

// A product of F32, F16 or BF16 weights (rows of k values) and at most
// kMaxMatVecCols F32 activation columns of k values: for r < rows and
// c < cols,
//   dst[c * dst_col_stride + r] = dot(weight row r, x column c).
// Weights are converted in registers and read once.
struct FloatMatVecArgs {
  const char* w;       // weight row 0
  size_t w_row_bytes;  // bytes between weight rows
  int64_t rows;
  const float* x;        // column 0
  int64_t x_col_stride;  // floats between columns
  int64_t cols;          // 1..kMaxMatVecCols
  int64_t k;
  float* dst;
  int64_t dst_col_stride;  // floats between destination columns
};

// A product of F32, F16 or BF16 weights and at least kMinTileCols F32 columns
// (cols: any count from there; k a multiple of 16) by FMAs, the weights
// converted to F32 exactly and the columns as they are: for r < rows and
// c < cols, dst[c * dst_col_stride + r] = dot(weight row r, x column c),
// with each thread's scratch of kFloatGemmScratchBytes, 64-byte aligned.
struct FloatGemmArgs : FloatMatVecArgs {
  char* scratch;
};

// A band of 32 weight rows' 256 values as F32.
inline constexpr size_t kFloatGemmScratchBytes = 32 * 256 * sizeof(float);

// One block of flash attention with online softmax: nq F32 query rows
// against n key and value rows of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0 or
// Q5_1 (values as the dequantizers make them). For each query i, with its
// running maximum m[i], sum l[i] and output accumulator acc[i * dv, +dv):
//   s_j = scale * dot(q_i, k_j), softcapped to softcap * tanh(s_j /
//   softcap) when softcap != 0, plus bias[i * n + j] (bias may be null;
//   -inf excludes key j for query i: its key row and, for that query, its
//   value row may hold anything, NaN included);
//   m' = max(m[i], max_j s_j); acc, l *= e^(m[i] - m'); then acc += e^(s_j -
//   m') v_j and l += e^(s_j - m') over j; m[i] = m'.
// Rows start at -inf, 0 and zeros; the output is acc / l (0 where l is 0).
struct AttnBlockArgs {
  const float* q;  // nq rows of d floats, contiguous
  int64_t nq;
  const char* k;  // n rows of d values of k_type, k_stride bytes apart
  size_t k_stride;
  Type k_type;
  const char* v;  // n rows of dv values of v_type, v_stride bytes apart
  size_t v_stride;
  Type v_type;
  const float* bias;  // nq rows of n floats, or null
  int64_t n;
  // The n keys and values after these are the next block's: the kernel
  // may ask the caches for them.
  bool next_follows = false;
  int64_t d;
  int64_t dv;
  float scale;
  float softcap;
  float* scores;  // nq * n floats of scratch
  float* m;
  float* l;
  float* acc;
};

// RoPE of `rows` rows of n floats at one position: each row's first
// 2 * pairs values rotated by the pair angles (cos, sin already scaled),
// the rest copied; dst may alias x. NeoX pairs (i, i + pairs) take cos[i]
// and sin[i]; normal pairs (2i, 2i + 1) take them spread over the pair's
// values, sin with the sign of its term (RopeAngleCache's layout): cos[2i]
// = cos[2i + 1] = cos_i, -sin[2i] = sin[2i + 1] = sin_i.
struct RopeArgs {
  const float* x;  // row 0
  size_t x_row_bytes;
  float* dst;
  size_t dst_row_bytes;
  int64_t rows;
  int64_t n;
  int64_t pairs;
  bool neox;
  const float* cos;
  const float* sin;
};

enum class BinaryKind { kAdd, kSub, kMul, kDiv };

// Activations: SiLU x / (1 + e^-x) and GELU in its tanh form
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
enum class ActKind { kSilu, kGelu };

struct CpuKernels {
  SimdLevel level;
  // Quantizes `k` floats (k % 32 == 0) into one activation row.
  void (*quantize_act)(const float* x, char* row, int64_t k);
  // Quantizes `k` floats (k % 256 == 0) into one K activation row.
  void (*quantize_act_k)(const float* x, char* row, int64_t k);
  void (*mul_mat_q8_0)(const QuantMatMulArgs& args);
  void (*mul_mat_q4_0)(const QuantMatMulArgs& args);
  void (*mul_mat_q4_1)(const QuantMatMulArgs& args);
  void (*mul_mat_q5_0)(const QuantMatMulArgs& args);
  void (*mul_mat_q5_1)(const QuantMatMulArgs& args);
  // K-quant weights against K activation rows.
  void (*mul_mat_q2_k)(const QuantMatMulArgs& args);
  void (*mul_mat_q3_k)(const QuantMatMulArgs& args);
  void (*mul_mat_q4_k)(const QuantMatMulArgs& args);
  void (*mul_mat_q5_k)(const QuantMatMulArgs& args);
  void (*mul_mat_q6_k)(const QuantMatMulArgs& args);
  // Float weights times few activation columns, by weight type.
  void (*mat_vec_f32)(const FloatMatVecArgs& args);
  void (*mat_vec_f16)(const FloatMatVecArgs& args);
  void (*mat_vec_bf16)(const FloatMatVecArgs& args);
  // Float weights times many columns (FloatGemmArgs), null at levels
  // without them.
  void (*gemm_f32)(const FloatGemmArgs& args);
  void (*gemm_f16)(const FloatGemmArgs& args);
  void (*gemm_bf16)(const FloatGemmArgs& args);
  // The tile products (see TileGemmArgs), null at levels without tile
  // units. tile_pack_bf16 packs `cols` (<= kTileCols) F32 columns of k
  // values, x_col_stride floats apart (for BF16 and F16 weights);
  // tile_pack_q8 packs `cols` quantized
  // activation rows (ActRowBytes(k)) act_row_bytes apart.
  void (*tile_pack_bf16)(const float* x, int64_t x_col_stride, int64_t cols,
                         int64_t k, char* group);
  void (*tile_pack_q8)(const char* act, size_t act_row_bytes, int64_t cols,
                       int64_t k, char* group);
  void (*tile_mul_mat_bf16)(const TileGemmArgs& args);
  void (*tile_mul_mat_f16)(const TileGemmArgs& args);
  void (*tile_mul_mat_q8_0)(const TileGemmArgs& args);
  void (*tile_mul_mat_q4_0)(const TileGemmArgs& args);
  // k_type and v_type are any of IsAttnKvType's.
  void (*attn_block)(const AttnBlockArgs& args);
  // Converts `n` F16 or BF16 values to F32.
  void (*f16_to_f32)(const uint16_t* x, float* y, int64_t n);
  void (*bf16_to_f32)(const uint16_t* x, float* y, int64_t n);
  // Converts `n` values (n a multiple of 32) of Q8_0 or Q4_0 blocks to F32,
  // equal bit for bit to the reference dequantizers.
  void (*q8_0_to_f32)(const void* x, float* y, int64_t n);
  void (*q4_0_to_f32)(const void* x, float* y, int64_t n);
  // Q4_1, Q5_0 and Q5_1 likewise (graph/block_quant.h).
  void (*q4_1_to_f32)(const void* x, float* y, int64_t n);
  void (*q5_0_to_f32)(const void* x, float* y, int64_t n);
  void (*q5_1_to_f32)(const void* x, float* y, int64_t n);
  // Converts `n` F32 values to F16 or BF16, rounding to nearest even (as
  // Fp32ToFp16 and Fp32ToBf16 do).
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n);
  void (*f32_to_bf16)(const float* x, uint16_t* y, int64_t n);
  // dst[i] = a[i] op b[i] for i < n (dst may alias a or b).
  void (*binary)(BinaryKind kind, const float* a, const float* b, float* dst,
                 int64_t n);
  // dst[i] = act(x[i]) * g[i], or act(x[i]) when g is null, for i < n
  // (dst may alias x or g).
  void (*act)(ActKind kind, const float* x, const float* g, float* dst,
              int64_t n);
  // dst = x / sqrt(mean(x^2) + eps) (rms) or (x - mean) / sqrt(var + eps);
  // dst may alias x.
  void (*norm)(const float* x, float* dst, int64_t n, float eps, bool rms);
  // dst = softmax(x * scale + slope * mask); mask may be null; dst may alias
  // x.
  void (*soft_max)(const float* x, const float* mask, float* dst, int64_t n,
                   float scale, float slope);
  void (*rope)(const RopeArgs& args);
};

// The kernels of `level`; the caller makes sure the CPU supports it.
const CpuKernels& KernelsFor(SimdLevel level);

// Converts `n` values of a row stored as `type` to F32: F16, BF16 and the
// 32-value blocks by the level's kernels, other types by the reference
// conversion (RowToFloat). A quantized row is whole blocks.
void RowToF32(const CpuKernels& kernels, Type type, const void* row, float* dst,
              int64_t n);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_KERNELS_H_
