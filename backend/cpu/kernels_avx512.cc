// The AVX-512 kernels (SimdLevel::kAvx512), compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx512vnni (and the AVX2 flags). The products of
// 32-value blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) take two 32-value blocks per
// 512-bit register and use VNNI dpbusd (u8 x s8 sums of four) for the integer
// dot products; an odd last block goes through the 256-bit form. The K-quant
// products (kernels_kquant_x86.inc) scale their 16-bit pair sums with VNNI
// vpdpwssd; against one column (decode) every K-quant has a kernel in
// 512-bit registers (kernels_kquant_column_avx512.inc).

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_levels.h"
#include "graph/block_quant.h"
#include "graph/kquant.h"
#include "graph/type.h"

namespace tessera::cpu_avx512 {
namespace {

#include "backend/cpu/kernels_generic.inc"

void F16ToF32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) y[i] = _cvtsh_ss(x[i]);
}

void F32ToF16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(y + i),
        _mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) y[i] = Fp32ToFp16(x[i]);
}

float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// [p[0], p[1]] in the low 64 bits: an unaligned 64-bit load (p is only
// float-aligned).
__m128 FloatPair(const float* p) {
  return _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// [p[0] x 8, p[1] x 8]
__m512 HalvesAt(const float* p) {
  const __m512i index = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1,  //
                                         0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(FloatPair(p)));
}

// A 16-word permute index [i x 8, j x 8]: with vpermw/vpermt2w over F16
// words, two blocks' scales spread over their lanes.
__m256i WordHalves(int i, int j) {
  return _mm256_mask_blend_epi16(0xFF00,
                                 _mm256_set1_epi16(static_cast<int16_t>(i)),
                                 _mm256_set1_epi16(static_cast<int16_t>(j)));
}

// [i x 16, j x 16] as 32 words: a value per 256-bit half.
__m512i WordHalves512(int i, int j) {
  return _mm512_mask_blend_epi16(0xFFFF0000,
                                 _mm512_set1_epi16(static_cast<int16_t>(i)),
                                 _mm512_set1_epi16(static_cast<int16_t>(j)));
}

// Per weight type: the unsigned bytes u of a block with w = u - kOffset
// (or w = u + m / dw for types with a minimum m, kHasMin), for one block
// (Load1) and two consecutive blocks (Load2), and the two blocks' scales as
// [d0 x 8, d1 x 8] (Scales2) and minimums likewise (Mins2).
struct Q8 {
  using Block = BlockQ8_0;
  static constexpr float kOffset = 128.0f;
  static constexpr bool kHasMin = false;
  static __m256i Load1(const Block& b) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
    return _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  static __m512i Load2(const Block* b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(Load1(b[0])), Load1(b[1]),
                              1);
  }
  static __m512 Scales2(const Block* b) {
    // d0 is word 0 of the 32 bytes at b[0] and d1 word 0 of those at b[1]
    // (index 16: the second source); both loads stay inside the blocks.
    return _mm512_cvtph_ps(_mm256_permutex2var_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&b[0])),
        WordHalves(0, 16),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&b[1]))));
  }
};

// The 32 nibbles of 16 bytes: low nibbles (values 0-15), then high (16-31).
__m256i Nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(raw, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);
  return _mm256_set_m128i(hi, lo);
}

// Nibbles of two blocks' 16 bytes each, as Nibbles(qs0) then Nibbles(qs1).
__m512i Nibbles2(const uint8_t* qs0, const uint8_t* qs1) {
  // 128-bit lanes [qs0, qs0, qs1, qs1], shifted by [0, 4, 0, 4] bits.
  __m512i v = _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0)));
  v = _mm512_mask_broadcast_i32x4(
      v, 0xFF00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)));
  // 16-bit shifts: bits a shift moves between a word's bytes are masked.
  const __m512i shift = _mm512_mask_blend_epi16(
      0xFF00FF00, _mm512_setzero_si512(), _mm512_set1_epi16(4));
  return _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(0x0F));
}

// The 32-bit word of a Q5 block's fifth bits: bit i belongs to value i.
uint32_t FifthBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return bits;
}

// Nibbles (one block, or two) with 16 added where the fifth bit is set.
__m256i FiveBitLevels(const uint8_t* qs, const uint8_t* qh) {
  const __m256i u = Nibbles(qs);
  return _mm256_mask_add_epi8(u, _cvtu32_mask32(FifthBits(qh)), u,
                              _mm256_set1_epi8(16));
}

template <typename Block>
__m512i FiveBitLevels2(const Block* b) {
  const __m512i u = Nibbles2(b[0].qs, b[1].qs);
  const uint64_t bits = FifthBits(b[0].qh) | uint64_t{FifthBits(b[1].qh)} << 32;
  return _mm512_mask_add_epi8(u, _cvtu64_mask64(bits), u, _mm512_set1_epi8(16));
}

// [h0 x 8, h1 x 8] for the fp16 word `kWord` of two consecutive blocks of at
// most 32 bytes each (h1 is word kWord + sizeof(Block) / 2 of the 32 bytes
// at b[0]; the load stays inside the two blocks).
template <int kWord, typename Block>
__m512 HalfPair(const Block* b) {
  static_assert(sizeof(Block) % 2 == 0 && kWord + sizeof(Block) / 2 < 16);
  return _mm512_cvtph_ps(_mm256_permutexvar_epi16(
      WordHalves(kWord, kWord + sizeof(Block) / 2),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&b[0]))));
}

struct Q4 {
  using Block = BlockQ4_0;
  static constexpr float kOffset = 8.0f;
  static constexpr bool kHasMin = false;
  static __m256i Load1(const Block& b) { return Nibbles(b.qs); }
  static __m512i Load2(const Block* b) { return Nibbles2(b[0].qs, b[1].qs); }
  static __m512 Scales2(const Block* b) { return HalfPair<0>(b); }
};

struct Q5 {
  using Block = BlockQ5_0;
  static constexpr float kOffset = 16.0f;
  static constexpr bool kHasMin = false;
  static __m256i Load1(const Block& b) { return FiveBitLevels(b.qs, b.qh); }
  static __m512i Load2(const Block* b) { return FiveBitLevels2(b); }
  static __m512 Scales2(const Block* b) { return HalfPair<0>(b); }
};

struct Q4Min {
  using Block = BlockQ4_1;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kHasMin = true;
  static __m256i Load1(const Block& b) { return Nibbles(b.qs); }
  static __m512i Load2(const Block* b) { return Nibbles2(b[0].qs, b[1].qs); }
  static __m512 Scales2(const Block* b) { return HalfPair<0>(b); }
  static __m512 Mins2(const Block* b) { return HalfPair<1>(b); }
};

struct Q5Min {
  using Block = BlockQ5_1;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kHasMin = true;
  static __m256i Load1(const Block& b) { return FiveBitLevels(b.qs, b.qh); }
  static __m512i Load2(const Block* b) { return FiveBitLevels2(b); }
  static __m512 Scales2(const Block* b) { return HalfPair<0>(b); }
  static __m512 Mins2(const Block* b) { return HalfPair<1>(b); }
};

// contribution of a block = dw * (da * dot(u, q) - kOffset * s), with s the
// activation block's d * sum(q), or dw * da * dot(u, q) + m * s with a
// minimum; each of a block's 8 lanes carries 1/8 of the offset or minimum
// term. Tiles of up to 4 x 4: sixteen accumulators and four rows' levels
// and scales fit the thirty-two registers, and each column's activation
// and scales serve four rows (bench/ops MUL_MAT m=4096, k=14336 on a Zen 4
// VM, 2 x 4 tiles then 4 x 4, ms: n=8 q8_0 4.81-4.87 and 4.00-4.06, q4_0
// 4.34-4.37 and 3.73-3.75, q5_1 5.83-5.84 and 5.57-5.60; n=512 q8_0
// 291-301 and 252-254, q4_0 285-291 and 242-245).
template <typename T>
struct QuantKernel {
  using Block = typename T::Block;

  static constexpr int64_t kBlockBytes = sizeof(Block);

  template <int R, int C>
  static void Tile(const QuantMatMulArgs& a, int64_t r0, int64_t c0) {
    const int64_t nb = a.k / 32;
    const TilePrefetch<R> prefetch(nb * kBlockBytes, a.w_row_bytes);
    const Block* w[R];
    for (int r = 0; r < R; ++r) {
      w[r] = reinterpret_cast<const Block*>(a.w + (r0 + r) * a.w_row_bytes);
    }
    const int8_t* q[C];
    const float* d[C];
    for (int c = 0; c < C; ++c) {
      const char* row = a.act + (c0 + c) * a.act_row_bytes;
      q[c] = reinterpret_cast<const int8_t*>(row);
      d[c] = reinterpret_cast<const float*>(row + a.k);
    }
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    }
    const float term = T::kHasMin ? 1.0f / 8.0f : T::kOffset / 8.0f;
    const __m512 offset = _mm512_set1_ps(term);
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      __m512i u[R];
      __m512 dw[R];
      __m512 mw[R];
      for (int r = 0; r < R; ++r) {
        prefetch(w[r] + b, b * kBlockBytes);
        u[r] = T::Load2(w[r] + b);
        dw[r] = T::Scales2(w[r] + b);
        if constexpr (T::kHasMin) mw[r] = T::Mins2(w[r] + b);
      }
      for (int c = 0; c < C; ++c) {
        const __m512i qv = _mm512_loadu_si512(q[c] + 32 * b);
        const __m512 da = HalvesAt(d[c] + b);
        const __m512 sa = _mm512_mul_ps(HalvesAt(d[c] + nb + b), offset);
        for (int r = 0; r < R; ++r) {
          const __m512 sum = _mm512_cvtepi32_ps(
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[r], qv));
          if constexpr (T::kHasMin) {
            acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(sum, da), dw[r],
                                        _mm512_fmadd_ps(sa, mw[r], acc[r][c]));
          } else {
            acc[r][c] =
                _mm512_fmadd_ps(_mm512_fmsub_ps(sum, da, sa), dw[r], acc[r][c]);
          }
        }
      }
    }
    __m256 tail[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) tail[r][c] = _mm256_setzero_ps();
    }
    if (b < nb) {
      for (int r = 0; r < R; ++r) {
        const __m256i u = T::Load1(w[r][b]);
        const __m256 dw = _mm256_set1_ps(_cvtsh_ss(w[r][b].d));
        for (int c = 0; c < C; ++c) {
          const __m256i qv =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[c] + 32 * b));
          const __m256 sum = _mm256_cvtepi32_ps(
              _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, qv));
          const __m256 da = _mm256_set1_ps(d[c][b]);
          const __m256 sa = _mm256_set1_ps(d[c][nb + b] * term);
          if constexpr (T::kHasMin) {
            tail[r][c] = _mm256_fmadd_ps(
                _mm256_mul_ps(sum, da), dw,
                _mm256_mul_ps(sa, _mm256_set1_ps(_cvtsh_ss(w[r][b].m))));
          } else {
            tail[r][c] = _mm256_mul_ps(_mm256_fmsub_ps(sum, da, sa), dw);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        a.dst[(c0 + c) * a.dst_col_stride + r0 + r] =
            _mm512_reduce_add_ps(acc[r][c]) + HorizontalSum(tail[r][c]);
      }
    }
  }
};

// One block's contribution to a product with one activation column, in
// 256 bits: the last blocks of a row that fill no step of the column
// kernels below.
template <typename T>
float BlockDot(const typename T::Block& w, const int8_t* q, float da,
               float sa) {
  const __m256i dot = _mm256_dpbusd_epi32(
      _mm256_setzero_si256(), T::Load1(w),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  return BlockTerm<T>(w, HorizontalSum(_mm256_cvtepi32_ps(dot)), da, sa);
}

// What the four-block column kernels read besides a step's weights: rows
// r0 .. r0 + 3 (the last of `rows` repeated where rows < 4) and the
// activation row's levels q, scales da and scaled sums sa (ActRowBytes).
struct QuadColumnOperands {
  QuadColumnOperands(const QuantMatMulArgs& a, int64_t r0, int rows)
      : nb(a.k / 32),
        q(reinterpret_cast<const int8_t*>(a.act)),
        da(reinterpret_cast<const float*>(a.act + a.k)),
        sa(da + nb) {
    for (int r = 0; r < 4; ++r) {
      w[r] = a.w + (r0 + std::min(r, rows - 1)) * a.w_row_bytes;
    }
  }
  // The activation's 128 values of blocks b .. b + 3 as the blocks' first
  // 16 values (lo) and their last 16 (hi), block j in 128-bit lane j.
  void Halves(int64_t b, __m512i& lo, __m512i& hi) const {
    const __m512i q0 = _mm512_loadu_si512(q + 32 * b);
    const __m512i q1 = _mm512_loadu_si512(q + 32 * b + 64);
    lo = _mm512_shuffle_i64x2(q0, q1, 0x88);
    hi = _mm512_shuffle_i64x2(q0, q1, 0xDD);
  }
  int64_t nb;  // blocks per row
  const char* w[4];
  const int8_t* q;
  const float* da;
  const float* sa;
};

// The end of a four-block column kernel: dst[r] = row r's sum of acc[r],
// its four lanes of `offset` (the activation's scaled sums times dw, less
// kOffset times them, or times mw, added) and the blocks from b on, which
// fill no step, for r < R.
template <typename T, int R>
void StoreQuadRows(const __m512 (&acc)[R], __m512 offset,
                   const QuadColumnOperands& in, int64_t b, float* dst) {
  alignas(64) float offsets[16];
  _mm512_store_ps(offsets, offset);
  for (int r = 0; r < R; ++r) {
    const float* o = offsets + 4 * r;
    float sum = _mm512_reduce_add_ps(acc[r]) +
                OffsetTerm<T>((o[0] + o[1]) + (o[2] + o[3]));
    const auto* row = reinterpret_cast<const typename T::Block*>(in.w[r]);
    for (int64_t i = b; i < in.nb; ++i) {
      sum += BlockDot<T>(row[i], in.q + 32 * i, in.da[i], in.sa[i]);
    }
    dst[r] = sum;
  }
}

// Q4_0 and Q4_1 (T: Q4, Q4Min) against one activation column (a decode
// step's matrix-vector product), up to four rows at a time, four blocks per
// step, in fewer instructions per block than QuantKernel's tiles:
//  - The first 64 bytes of a row's four blocks hold their scales (and
//    minimums) and the first three blocks' nibbles; 16 more bytes the
//    fourth's. One word permute of the two loads puts the four blocks'
//    nibble bytes in a register, and two dpbusd (the low nibbles against
//    the blocks' first 16 activation values, the high against the last 16)
//    leave each block's dot product in four 32-bit lanes of its own.
//  - The four rows' scales go into one vector per step from the rows'
//    first loads (dw of row r, block b + j in float 4r + j; the minimums
//    mw in a second), are multiplied by the activation's scales there, and
//    are spread over a row's lanes with one permute.
//  - The activation block's scaled sum times dw (the levels are w +
//    kOffset) or times mw is accumulated for all rows at once, and taken
//    off or added at the end.
// Nine 512-bit instructions per row and step, where two blocks per step
// spent six per row for every two blocks, and half the shared ones. A Zen 4
// VM runs almost every 512-bit instruction at one a cycle: bench/ops
// MUL_MAT n=1 (m=4096, k=14336; 33 MB of Q4_0, about its L3's size) ran
// q4_0 at 201-214 GFLOPS against 128-147 with two blocks per step, q4_1 at
// 182-193 against 116-124.
template <typename T, int R>
void BlockQuadColumn(const QuantMatMulArgs& a, int64_t r0) {
  static_assert(R >= 1 && R <= 4, "four floats per row in 512 bits");
  using Block = typename T::Block;
  constexpr int kBlockBytes = sizeof(Block);
  constexpr int kQs = offsetof(Block, qs);
  static_assert(kQs % 2 == 0 && kBlockBytes % 2 == 0,
                "nibbles and scales on word boundaries");
  // Words 0..63 of the permute's sources: the first 64 bytes of the four
  // blocks, then the 16 nibble bytes of the fourth at kLastQs.
  constexpr int kLastQs = 3 * kBlockBytes + kQs;
  static_assert(kLastQs + 16 == 4 * kBlockBytes && kLastQs <= 64 &&
                (2 * kBlockBytes + kQs) / 2 + 7 < 32 &&
                3 * kBlockBytes / 2 + 1 < 32);
  struct Indices {
    alignas(64) int16_t nibbles[32];  // block j's 8 words in words 8j..8j+7
    // Row r's (and r + 1's) scale words for blocks 0..3 in words 4r..4r+3,
    // minimums in 16 + 4r.., rows 0 and 1 from sources (row 0, row 1),
    // rows 2 and 3 from (row 2, row 3).
    alignas(64) int16_t scales[2][32];
    alignas(64) int32_t spread[4][16];  // row r: float 4r + j in lanes 4j..
  };
  static constexpr Indices kIndices = [] {
    Indices x{};
    for (int i = 0; i < 32; ++i) {
      const int j = i / 8;
      x.nibbles[i] = j < 3 ? (j * kBlockBytes + kQs) / 2 + i % 8 : 32 + i % 8;
    }
    for (int pair = 0; pair < 2; ++pair) {
      for (int r = 2 * pair; r < 2 * pair + 2; ++r) {
        for (int j = 0; j < 4; ++j) {
          const int word = (r % 2) * 32 + j * kBlockBytes / 2;
          x.scales[pair][4 * r + j] = word;
          x.scales[pair][16 + 4 * r + j] = word + 1;
        }
      }
    }
    for (int r = 0; r < 4; ++r) {
      for (int i = 0; i < 16; ++i) x.spread[r][i] = 4 * r + i / 4;
    }
    return x;
  }();
  const QuadColumnOperands in(a, r0, R);
  const int64_t nb = in.nb;
  const char* const* w = in.w;
  const __m512i nibble_words = _mm512_load_si512(kIndices.nibbles);
  const __m512i scales01 = _mm512_load_si512(kIndices.scales[0]);
  const __m512i scales23 = _mm512_load_si512(kIndices.scales[1]);
  __m512i spread[R];
  for (int r = 0; r < R; ++r) spread[r] = _mm512_load_si512(kIndices.spread[r]);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const TilePrefetch<R> prefetch(nb * kBlockBytes, a.w_row_bytes);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  __m512 offset = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const int64_t at = b * kBlockBytes;
    __m512i head[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) head[r] = _mm512_loadu_si512(w[r] + at);
    // Rows 0 and 1 in words 0..7 (16..23), rows 2 and 3 in 8..15 (24..31).
    const __m512i words = _mm512_mask_blend_epi16(
        0xFF00FF00, _mm512_permutex2var_epi16(head[0], scales01, head[1]),
        _mm512_permutex2var_epi16(head[2], scales23, head[3]));
    const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(words));
    const __m512 act_s = _mm512_broadcast_f32x4(_mm_loadu_ps(in.sa + b));
    if constexpr (T::kHasMin) {
      const __m512 mw = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(words, 1));
      offset = _mm512_fmadd_ps(mw, act_s, offset);
    } else {
      offset = _mm512_fmadd_ps(dw, act_s, offset);
    }
    const __m512 scales =
        _mm512_mul_ps(dw, _mm512_broadcast_f32x4(_mm_loadu_ps(in.da + b)));
    __m512i q_lo, q_hi;
    in.Halves(b, q_lo, q_hi);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      prefetch.template Lines<4 * kBlockBytes>(w[r] + at, at, r);
      const __m512i v = _mm512_permutex2var_epi16(
          head[r], nibble_words,
          _mm512_castsi128_si512(_mm_loadu_si128(
              reinterpret_cast<const __m128i*>(w[r] + at + kLastQs))));
      const __m512i lo = _mm512_and_si512(v, low);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      const __m512i dot = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, q_lo), hi, q_hi);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                               _mm512_permutexvar_ps(spread[r], scales), acc[r]);
    }
  }
  StoreQuadRows<T>(acc, offset, in, b, a.dst + r0);
}

// Q5_0 and Q5_1 (T: Q5, Q5Min) against one activation column, up to four
// rows at a time, four blocks per step, as BlockQuadColumn:
//  - A step's four blocks (88 or 96 bytes) are two loads per row, the
//    first 64 bytes and the last 32. One word permute of the pair gathers
//    the blocks' nibble bytes, as in BlockQuadColumn, and another their
//    scales (and minimums).
//  - The fifth bits of the blocks' first 16 values, then of their last 16,
//    are each a 64-bit mask in the nibbles' layout (16 bits per block).
//    The scales' permute also gathers the blocks' qh words; a byte shuffle
//    puts in each byte of a value the qh byte that holds its bit, and a
//    byte test against that bit makes the mask. A masked byte add gives
//    those levels their 16.
//  - The rows' scales meet the activation's in one vector (dw of row r,
//    block b + j in float 4r + j) and the offset or minimum terms are
//    accumulated for all rows at once, as in BlockQuadColumn.
// On one thread of a Zen 4 VM, weights in L2 (64 rows, k = 4096): 4.01
// (q5_0) and 4.18 ns (q5_1) per row and four blocks with two blocks per
// step, 3.65 and 3.84 with the fifth bits gathered by a permute of their
// own, 3.19 and 3.34 with the masks put together in general-purpose
// registers from 16-bit loads (22 instructions a row and step). On one
// thread of a Zen 5 VM, which has more vector ports, the same weights ran
// at 40-41 (q5_0) and 43-45 GB/s (q5_1) with those registers and at 49
// with the masks made as here.
template <typename T, int R>
void FiveBitQuadColumn(const QuantMatMulArgs& a, int64_t r0) {
  static_assert(R >= 1 && R <= 4, "four floats per row in 512 bits");
  using Block = typename T::Block;
  constexpr int kBlockBytes = sizeof(Block);
  constexpr int kQs = offsetof(Block, qs);
  constexpr int kQh = offsetof(Block, qh);
  // The second load: the last 32 bytes of the four blocks.
  constexpr int kTail = 4 * kBlockBytes - 32;
  static_assert(kBlockBytes % 2 == 0 && kQs % 2 == 0 && kQh % 2 == 0 &&
                    kTail > 0 && kTail <= 64,
                "the two loads cover the four blocks in words");
  // The word of the two loads (as the permute's two sources) holding the
  // even byte x of the four blocks.
  constexpr auto word_of = [](int x) {
    return static_cast<int16_t>(x < 64 ? x / 2 : 32 + (x - kTail) / 2);
  };
  struct Indices {
    alignas(64) int16_t nibbles[32];  // block j's 8 words in words 8j..8j+7
    // Words 0..3: the blocks' d; 4..7: their m (Q5_1); 8 + 2j and 9 + 2j:
    // block j's qh (bytes 4j..4j+3 of the second 128-bit lane).
    alignas(64) int16_t header[32];
    alignas(64) int32_t spread[4][16];  // row r: float 4r + j in lanes 4j..
    // Byte 16j + i (value i of block j, i < 16): the byte of block j's qh
    // in that lane holding the fifth bit of value i (first_sel) or 16 + i
    // (last_sel), and that bit (bit).
    alignas(64) int8_t first_sel[64];
    alignas(64) int8_t last_sel[64];
    alignas(64) int8_t bit[64];
  };
  static constexpr Indices kIndices = [&] {
    Indices x{};
    for (int i = 0; i < 32; ++i) {
      x.nibbles[i] = word_of((i / 8) * kBlockBytes + kQs + 2 * (i % 8));
    }
    for (int j = 0; j < 4; ++j) {
      const int block = j * kBlockBytes;
      x.header[j] = word_of(block);
      if (T::kHasMin) x.header[4 + j] = word_of(block + 2);
      x.header[8 + 2 * j] = word_of(block + kQh);
      x.header[9 + 2 * j] = word_of(block + kQh + 2);
    }
    for (int i = 0; i < 64; ++i) {
      const int j = i / 16, v = i % 16;
      x.first_sel[i] = static_cast<int8_t>(4 * j + v / 8);
      x.last_sel[i] = static_cast<int8_t>(4 * j + 2 + v / 8);
      x.bit[i] = static_cast<int8_t>(1 << (v % 8));
    }
    for (int r = 0; r < 4; ++r) {
      for (int i = 0; i < 16; ++i) x.spread[r][i] = 4 * r + i / 4;
    }
    return x;
  }();
  const QuadColumnOperands in(a, r0, R);
  const int64_t nb = in.nb;
  const char* const* w = in.w;
  const __m512i nibble_words = _mm512_load_si512(kIndices.nibbles);
  const __m512i header_words = _mm512_load_si512(kIndices.header);
  const __m512i first_sel = _mm512_load_si512(kIndices.first_sel);
  const __m512i last_sel = _mm512_load_si512(kIndices.last_sel);
  const __m512i bit = _mm512_load_si512(kIndices.bit);
  __m512i spread[R];
  for (int r = 0; r < R; ++r) spread[r] = _mm512_load_si512(kIndices.spread[r]);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i sixteen = _mm512_set1_epi8(16);
  const TilePrefetch<R> prefetch(nb * kBlockBytes, a.w_row_bytes);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  __m512 offset = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const int64_t at = b * kBlockBytes;
    __m512i q_lo, q_hi;
    in.Halves(b, q_lo, q_hi);
    __m512i dot[R];
    __m512 dw = _mm512_setzero_ps();
    __m512 mw = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      prefetch.template Lines<4 * kBlockBytes>(w[r] + at, at, r);
      const __m512i head = _mm512_loadu_si512(w[r] + at);
      const __m512i tail = _mm512_castsi256_si512(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(w[r] + at + kTail)));
      const __m512i v = _mm512_permutex2var_epi16(head, nibble_words, tail);
      const __m512i header =
          _mm512_permutex2var_epi16(head, header_words, tail);
      const __m128i scale_words = _mm512_castsi512_si128(header);
      dw = _mm512_insertf32x4(dw, _mm_cvtph_ps(scale_words), r);
      if constexpr (T::kHasMin) {
        mw = _mm512_insertf32x4(
            mw, _mm_cvtph_ps(_mm_unpackhi_epi64(scale_words, scale_words)), r);
      }
      // Bit 16j + i of `first` (`last`): bit i (16 + i) of block j's qh.
      // The qh words in every 128-bit lane, for the in-lane shuffles.
      const __m512i qh = _mm512_shuffle_i32x4(header, header, 0x55);
      const __mmask64 first = _mm512_test_epi8_mask(
          _mm512_shuffle_epi8(qh, first_sel), bit);
      const __mmask64 last = _mm512_test_epi8_mask(
          _mm512_shuffle_epi8(qh, last_sel), bit);
      __m512i lo = _mm512_and_si512(v, low);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      lo = _mm512_mask_add_epi8(lo, first, lo, sixteen);
      hi = _mm512_mask_add_epi8(hi, last, hi, sixteen);
      dot[r] = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, q_lo), hi, q_hi);
    }
    const __m512 act_s = _mm512_broadcast_f32x4(_mm_loadu_ps(in.sa + b));
    offset = _mm512_fmadd_ps(T::kHasMin ? mw : dw, act_s, offset);
    const __m512 scales =
        _mm512_mul_ps(dw, _mm512_broadcast_f32x4(_mm_loadu_ps(in.da + b)));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      acc[r] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]),
                          _mm512_permutexvar_ps(spread[r], scales), acc[r]);
    }
  }
  StoreQuadRows<T>(acc, offset, in, b, a.dst + r0);
}

// Q8_0 against one activation column, up to four rows at a time, four
// blocks (136 bytes) per step, as BlockQuadColumn:
//  - Two word permutes gather the blocks' first 16 levels (from the step's
//    bytes 0..127) and their last 16 (from bytes 8..135), each block in a
//    128-bit lane, so that two dpbusd leave each block's dot product in
//    four 32-bit lanes of its own, against the activation's values
//    regrouped the same way.
//  - A third permute spreads the row's four scales over those lanes; the
//    activation's scales and scaled sums (a quarter of the offset term per
//    lane) are spread once per step for all rows, and the offset is taken
//    off in the row's accumulator.
// Four 64-byte loads per row and step, where QuantKernel's tiles load each
// block's 32 levels and its scale on their own (eight loads for the same
// bytes). Streaming a 1.1 B model's matrices (1.1 GB of Q8_0, k = 2048)
// from memory on two threads of a Zen 4 VM, in minutes when a plain read
// ran at 50-55 GB/s, the tiles read the weights at 33 GB/s and this kernel
// at 47-50 (at 30-33 GB/s when the read did, as the tiles).
template <int R>
void Q8QuadColumn(const QuantMatMulArgs& a, int64_t r0) {
  static_assert(R >= 1 && R <= 4);
  constexpr int kBlockBytes = sizeof(BlockQ8_0);
  constexpr int kQs = offsetof(BlockQ8_0, qs);
  static_assert(kBlockBytes == 34 && kQs == 2);
  // Loads at bytes 0 and 64 of the step (words 0..63 of the first
  // permute), at 8 and 72 (words 4..67, as 0..63 of the second).
  constexpr int kWords = kBlockBytes / 2;
  struct Indices {
    alignas(64) int16_t first[32];   // block j's first 8 words in 8j..8j+7
    alignas(64) int16_t last[32];    // and its last 8
    alignas(64) int16_t scales[32];  // block j's d in words 4j..4j+3
    alignas(64) int32_t spread[16];  // float j in lanes 4j..4j+3
  };
  static constexpr Indices kIndices = [] {
    Indices x{};
    for (int i = 0; i < 32; ++i) {
      const int word = (i / 8) * kWords + kQs / 2 + i % 8;
      x.first[i] = static_cast<int16_t>(word);
      x.last[i] = static_cast<int16_t>(word + 8 - 4);
    }
    for (int i = 0; i < 16; ++i) {
      x.scales[i] = static_cast<int16_t>((i / 4) * kWords);
      x.spread[i] = i / 4;
    }
    return x;
  }();
  const QuadColumnOperands in(a, r0, R);
  const int64_t nb = in.nb;
  const char* const* w = in.w;
  const __m512i first_words = _mm512_load_si512(kIndices.first);
  const __m512i last_words = _mm512_load_si512(kIndices.last);
  const __m512i scale_words = _mm512_load_si512(kIndices.scales);
  const __m512i spread = _mm512_load_si512(kIndices.spread);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512 quarter_offset = _mm512_set1_ps(Q8::kOffset / 4);
  const TilePrefetch<R> prefetch(nb * kBlockBytes, a.w_row_bytes);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const int64_t at = b * kBlockBytes;
    __m512i q_lo, q_hi;
    in.Halves(b, q_lo, q_hi);
    const __m512 act_d = _mm512_permutexvar_ps(
        spread, _mm512_castps128_ps512(_mm_loadu_ps(in.da + b)));
    const __m512 act_s = _mm512_mul_ps(
        _mm512_permutexvar_ps(spread,
                              _mm512_castps128_ps512(_mm_loadu_ps(in.sa + b))),
        quarter_offset);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      prefetch.template Lines<4 * kBlockBytes>(w[r] + at, at, r);
      const char* step = w[r] + at;
      const __m512i head = _mm512_loadu_si512(step);
      const __m512i head_on = _mm512_loadu_si512(step + 64);
      const __m512i lo = _mm512_xor_si512(
          _mm512_permutex2var_epi16(head, first_words, head_on), sign);
      const __m512i hi = _mm512_xor_si512(
          _mm512_permutex2var_epi16(_mm512_loadu_si512(step + 8), last_words,
                                    _mm512_loadu_si512(step + 72)),
          sign);
      const __m512i dot = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, q_lo), hi, q_hi);
      const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(
          _mm512_permutex2var_epi16(head, scale_words, head_on)));
      acc[r] = _mm512_fmadd_ps(
          _mm512_fmsub_ps(_mm512_cvtepi32_ps(dot), act_d, act_s), dw, acc[r]);
    }
  }
  // The offset terms are in the accumulators already.
  StoreQuadRows<Q8>(acc, _mm512_setzero_ps(), in, b, a.dst + r0);
}

// The largest magnitude of n values (n a multiple of 16), NaN if any is
// NaN: BlockAbsMax in registers.
float AbsMaxOrNaN(const float* x, int n) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
  }
  return nan != 0 ? std::numeric_limits<float>::quiet_NaN()
                  : _mm512_reduce_max_ps(amax);
}

// ActLevel of 16 values at x, stored as bytes at q and returned as 32-bit
// lanes: x * inv rounded to nearest even (the default rounding mode, as
// nearbyint), and a level outside [-127, 127] (what NaN, infinities and a
// scale of 0 give) 0.
__m512i ActLevels16(const float* x, __m512 inv, int8_t* q) {
  const __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), inv));
  const __mmask16 in = _mm512_cmpge_epi32_mask(r, _mm512_set1_epi32(-127)) &
                       _mm512_cmple_epi32_mask(r, _mm512_set1_epi32(127));
  const __m512i v = _mm512_maskz_mov_epi32(in, r);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(v));
  return v;
}

// QuantizeActGeneric and QuantizeActKGeneric in registers, equal bit for
// bit: per block (32 or 256 values) the largest magnitude, the levels, and
// the block's sum (times its scale) or every 16 levels' sum.
void QuantizeAct(const float* x, char* row, int64_t k) {
  const int64_t nb = k / 32;
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* d = reinterpret_cast<float*>(row + k);
  float* s = d + nb;
  for (int64_t b = 0; b < nb; ++b) {
    const float amax = AbsMaxOrNaN(x + 32 * b, 32);
    const __m512 inv = _mm512_set1_ps(ActInverse(amax));
    const __m512i v0 = ActLevels16(x + 32 * b, inv, q + 32 * b);
    const __m512i v1 = ActLevels16(x + 32 * b + 16, inv, q + 32 * b + 16);
    d[b] = amax / 127.0f;
    s[b] = d[b] * static_cast<float>(
                      _mm512_reduce_add_epi32(_mm512_add_epi32(v0, v1)));
  }
}

void QuantizeActK(const float* x, char* row, int64_t k) {
  const int64_t ns = k / kQK_K;
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* d = reinterpret_cast<float*>(row + k);
  int16_t* s = reinterpret_cast<int16_t*>(d + ns);
  for (int64_t b = 0; b < ns; ++b) {
    const float amax = AbsMaxOrNaN(x + kQK_K * b, kQK_K);
    d[b] = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(ActInverse(amax));
    for (int g = 0; g < kQK_K / 16; ++g) {
      const int64_t i = kQK_K * b + 16 * g;
      s[i / 16] = static_cast<int16_t>(
          _mm512_reduce_add_epi32(ActLevels16(x + i, inv, q + i)));
    }
  }
}

// Four columns: a 2 x 4 tile's sixteen 512-bit accumulators (integer and
// float) take half of the thirty-two registers.
constexpr int kKTileCols = 4;

#include "backend/cpu/kernels_kquant_x86.inc"

#include "backend/cpu/kernels_kquant_column_avx512.inc"

// ExpNonPositive of 16 values: 2^f (f = x / ln 2 less its nearest integer
// fi) by the same polynomial, times 2^fi by vscalefps (e^-87 is still a
// normal float, so that equals the scalar kernel's exponent arithmetic);
// 0 where x < -87 or x is -inf, NaN kept.
__m512 ExpNonPositive16(__m512 x) {
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 fi =
      _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, fi);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.5403530e-4f), f,
                             _mm512_set1_ps(1.3333558e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  // Not less than -87, or unordered (NaN).
  const __mmask16 keep =
      _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(keep, p, fi);
}

// ExpShiftedSum 16 values at a time (the sum in 16 partial sums, as
// SumShifted's, added as a tree). bench/ops SOFT_MAX f32 [4096,512]: 17
// cycles per 16 values on one thread of a Zen 4 VM, against 24 with
// ExpShiftedSum.
float ExpShiftedSum16(float* x, int64_t n, float max) {
  const __m512 shift = _mm512_set1_ps(max);
  __m512 part = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e =
        ExpNonPositive16(_mm512_sub_ps(_mm512_loadu_ps(x + i), shift));
    _mm512_storeu_ps(x + i, e);
    part = _mm512_add_ps(part, e);
  }
  float sum = _mm512_reduce_add_ps(part);
  for (; i < n; ++i) {
    x[i] = ExpNonPositive(x[i] - max);
    sum += x[i];
  }
  return sum;
}

// Sigmoid of 16 values from e^-|x|, as the generic kernel's, the
// reciprocal of 1 + e^-|x| by vrcp14ps and a Newton step (about 2^-28
// relative before rounding) where that divides.
__m512 Sigmoid16(__m512 x) {
  const __m512 minus_abs = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
  const __m512 t = ExpNonPositive16(minus_abs);
  const __m512 d = _mm512_add_ps(t, _mm512_set1_ps(1.0f));
  const __m512 r0 = _mm512_rcp14_ps(d);
  const __m512 r =
      _mm512_mul_ps(r0, _mm512_fnmadd_ps(d, r0, _mm512_set1_ps(2.0f)));
  const __mmask16 negative =
      _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(r, negative, t, r);
}

// ActGeneric 16 values at a time by Sigmoid16 (the rest by ActGeneric).
// bench/ops GLU swiglu f32 [8192,512], 2 threads of a Zen 4 VM: 381-385
// us against 527 with ActGeneric, whose division the compiler keeps.
template <ActKind kKind, bool kGated>
void Act16(const float* x, const float* g, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 a;
    if constexpr (kKind == ActKind::kSilu) {
      a = _mm512_mul_ps(v, Sigmoid16(v));
    } else {
      // GeluTanh: x sigmoid(2u), u = sqrt(2 / pi) x (1 + 0.044715 x^2).
      const __m512 k = _mm512_set1_ps(2.0f * 0.79788456080286535588f);
      const __m512 inner = _mm512_fmadd_ps(
          _mm512_mul_ps(_mm512_set1_ps(0.044715f), v), v,
          _mm512_set1_ps(1.0f));
      a = _mm512_mul_ps(v, Sigmoid16(_mm512_mul_ps(_mm512_mul_ps(k, v),
                                                   inner)));
    }
    if constexpr (kGated) a = _mm512_mul_ps(a, _mm512_loadu_ps(g + i));
    _mm512_storeu_ps(dst + i, a);
  }
  ActGeneric(kKind, x + i, kGated ? g + i : nullptr, dst + i, n - i);
}

void Act(ActKind kind, const float* x, const float* g, float* dst,
         int64_t n) {
  if (kind == ActKind::kSilu) {
    return g != nullptr ? Act16<ActKind::kSilu, true>(x, g, dst, n)
                        : Act16<ActKind::kSilu, false>(x, g, dst, n);
  }
  return g != nullptr ? Act16<ActKind::kGelu, true>(x, g, dst, n)
                      : Act16<ActKind::kGelu, false>(x, g, dst, n);
}

#include "backend/cpu/kernels_bands_x86.inc"

struct FloatVec {
  using V = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kMaxAcc = 16;
  // Four rows whatever the column count for 2-byte weights: each column
  // vector feeds four products, and with eight columns that beat three
  // rows (which fit the registers; four spill accumulators) on a Zen 4 VM,
  // F16 4096 x 4096 weights on 2 threads: 1.48-1.51 against 2.60-2.65 ms
  // (n = 5..7 ran 1.5-2x as fast as with the 16 / C rows before). F32
  // weights take three rows from seven columns, where four spill: bench/ops
  // MUL_MAT f32 n=8 (m=4096, k=14336), 2 threads, builds alternating in
  // four pairs: 5.8-6.3 ms against 6.5-7.0 with four (F16 and BF16 ran as
  // fast or faster with four).
  static constexpr int MatVecRows(int cols, int weight_bytes) {
    return weight_bytes == 4 && cols >= 7 ? 3 : 4;
  }
  static V Zero() { return _mm512_setzero_ps(); }
  static bool AnyZero(V v) {
    return _mm512_cmp_ps_mask(v, Zero(), _CMP_EQ_OQ) != 0;
  }
  static V Broadcast(float x) { return _mm512_set1_ps(x); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float Sum(V v) { return _mm512_reduce_add_ps(v); }
  // Sum(v[i]) in float i for 16 vectors, as a tree of adds that transposes
  // as it goes (45 instructions; 16 reductions take about 140): each step
  // halves the vectors and doubles the sums one vector carries, in 128-bit
  // lanes and then within them. Float 4k + e of the result sums the first
  // step's input 4e + k; taking v[4k + e] as that input puts Sum(v[i]) in
  // float i.
  [[gnu::always_inline]] static V SumEach(const V* v) {
    auto input = [v](int j) { return v[4 * (j % 4) + j / 4]; };
    V pairs[8];  // lanes: two halves of two vectors
    for (int i = 0; i < 8; ++i) {
      const V a = input(2 * i);
      const V b = input(2 * i + 1);
      pairs[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44),
                               _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    V quads[4];  // lane k: four partial sums of one vector
    for (int i = 0; i < 4; ++i) {
      const V a = pairs[2 * i];
      const V b = pairs[2 * i + 1];
      quads[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88),
                               _mm512_shuffle_f32x4(a, b, 0xDD));
    }
    V halves[2];  // lane k: two partial sums each of four vectors
    for (int i = 0; i < 2; ++i) {
      const V a = quads[2 * i];
      const V b = quads[2 * i + 1];
      halves[i] =
          _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    }
    const V low =
        _mm512_shuffle_ps(halves[0], halves[1], _MM_SHUFFLE(1, 0, 1, 0));
    const V high =
        _mm512_shuffle_ps(halves[0], halves[1], _MM_SHUFFLE(3, 2, 3, 2));
    return _mm512_add_ps(low, high);
  }
  static V LoadF32(const float* p) { return _mm512_loadu_ps(p); }
  static void StoreF32(float* p, V v) { _mm512_storeu_ps(p, v); }
  // The first n (0..kWidth) floats at p, the rest 0; and their store.
  static V LoadFirst(const float* p, int n) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static void StoreFirst(float* p, V v, int n) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
  }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  // a * b - c, rounded once.
  static V FmaSub(V a, V b, V c) { return _mm512_fmsub_ps(a, b, c); }
  // Each pair of floats (2i, 2i + 1) swapped.
  static V SwapPairs(V v) {
    return _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
  }
  // v[i]'s float j becomes v[j]'s float i.
  static void Transpose(V (&v)[kWidth]) {
    __m512i w[kWidth];
    for (int i = 0; i < kWidth; ++i) w[i] = _mm512_castps_si512(v[i]);
    Transpose16(w);
    for (int i = 0; i < kWidth; ++i) v[i] = _mm512_castsi512_ps(w[i]);
  }
  static V LoadF16(const uint16_t* p) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V LoadBF16(const uint16_t* p) {
    const __m512i h = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
  static V LoadI8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  // 16 levels less `offset`: the low or high nibbles of 16 bytes, plus 16
  // where bit i of `fifth` is set.
  static V LoadNibbles(const uint8_t* p, bool high, int offset) {
    return Levels(Nibbles(p, high), offset);
  }
  static V LoadNibbles(const uint8_t* p, bool high, uint32_t fifth,
                       int offset) {
    const __m128i nibbles = Nibbles(p, high);
    return Levels(_mm_mask_add_epi8(nibbles, static_cast<__mmask16>(fifth),
                                    nibbles, _mm_set1_epi8(16)),
                  offset);
  }
  static __m128i Nibbles(const uint8_t* p, bool high) {
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if (high) bytes = _mm_srli_epi16(bytes, 4);
    return _mm_and_si128(bytes, _mm_set1_epi8(0x0F));
  }
  static V Levels(__m128i bytes, int offset) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
        _mm_sub_epi8(bytes, _mm_set1_epi8(static_cast<char>(offset)))));
  }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
};

#include "backend/cpu/kernels_mat_vec_x86.inc"
#include "backend/cpu/kernels_rope_x86.inc"

// Use FloatVec and the readers of kernels_mat_vec_x86.inc.
#include "backend/cpu/kernels_attn_x86.inc"
#include "backend/cpu/kernels_float_gemm_x86.inc"

void MulMatQ8(const QuantMatMulArgs& a) { RunTiles<QuantKernel<Q8>, 4, 4>(a); }
void MulMatQ4(const QuantMatMulArgs& a) { RunTiles<QuantKernel<Q4>, 4, 4>(a); }
void MulMatQ5(const QuantMatMulArgs& a) { RunTiles<QuantKernel<Q5>, 4, 4>(a); }
void MulMatQ4Min(const QuantMatMulArgs& a) {
  RunTiles<QuantKernel<Q4Min>, 4, 4>(a);
}
void MulMatQ5Min(const QuantMatMulArgs& a) {
  RunTiles<QuantKernel<Q5Min>, 4, 4>(a);
}

// Blocks of 32 levels (T::Load1) as floats, equal bit for bit to the
// reference dequantizers: (level - kOffset) * d, or d * level + m (whose
// product is exact, so fusing it changes nothing).
template <typename T>
void BlocksToF32(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const typename T::Block*>(x);
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m256i u = T::Load1(blocks[b]);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(blocks[b].d));
    const __m128i halves[2] = {_mm256_castsi256_si128(u),
                               _mm256_extracti128_si256(u, 1)};
    for (int h = 0; h < 2; ++h) {
      const __m512i level = _mm512_cvtepu8_epi32(halves[h]);
      __m512 v;
      if constexpr (T::kHasMin) {
        v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(level), d,
                            _mm512_set1_ps(_cvtsh_ss(blocks[b].m)));
      } else {
        const __m512i offset = _mm512_set1_epi32(static_cast<int>(T::kOffset));
        v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(level, offset)),
                          d);
      }
      _mm512_storeu_ps(y + 32 * b + 16 * h, v);
    }
  }
}

}  // namespace

const CpuKernels kKernels = {
    .level = SimdLevel::kAvx512,
    .quantize_act = QuantizeAct,
    .quantize_act_k = QuantizeActK,
    .mul_mat_q8_0 =
        MulMatColumns<Q8QuadColumn<kVecRows>, Q8QuadColumn<1>, MulMatQ8>,
    .mul_mat_q4_0 = MulMatColumns<BlockQuadColumn<Q4, kVecRows>,
                                  BlockQuadColumn<Q4, 1>, MulMatQ4>,
    .mul_mat_q4_1 = MulMatColumns<BlockQuadColumn<Q4Min, kVecRows>,
                                  BlockQuadColumn<Q4Min, 1>, MulMatQ4Min>,
    .mul_mat_q5_0 = MulMatColumns<FiveBitQuadColumn<Q5, kVecRows>,
                                  FiveBitQuadColumn<Q5, 1>, MulMatQ5>,
    .mul_mat_q5_1 = MulMatColumns<FiveBitQuadColumn<Q5Min, kVecRows>,
                                  FiveBitQuadColumn<Q5Min, 1>, MulMatQ5Min>,
    .mul_mat_q2_k = MulMatColumns<Q2KColumn<kVecRows>, Q2KColumn<1>, MulMatQ2K>,
    .mul_mat_q3_k = MulMatColumns<SymmetricKColumn<Q3KLevels, kVecRows>,
                                  SymmetricKColumn<Q3KLevels, 1>, MulMatQ3K>,
    .mul_mat_q4_k = MulMatColumns<KAffineColumn<BlockQ4_K, kVecRows>,
                                  KAffineColumn<BlockQ4_K, 1>, MulMatQ4K>,
    .mul_mat_q5_k = MulMatColumns<KAffineColumn<BlockQ5_K, kVecRows>,
                                  KAffineColumn<BlockQ5_K, 1>, MulMatQ5K>,
    .mul_mat_q6_k = MulMatColumns<SymmetricKColumn<Q6KLevels, kVecRows>,
                                  SymmetricKColumn<Q6KLevels, 1>, MulMatQ6K>,
    .mat_vec_f32 = MatVec<F32Weights>,
    .mat_vec_f16 = MatVec<F16Weights>,
    .mat_vec_bf16 = MatVec<BF16Weights>,
    .gemm_f32 = FloatGemm<F32Weights>,
    .gemm_f16 = FloatGemm<F16Weights>,
    .gemm_bf16 = FloatGemm<BF16Weights>,
    .attn_block = AttnByTypes<AttnGrouped>,
    .f16_to_f32 = F16ToF32,
    .bf16_to_f32 = Bf16ToF32Generic,
    .q8_0_to_f32 = BlocksToF32<Q8>,
    .q4_0_to_f32 = BlocksToF32<Q4>,
    .q4_1_to_f32 = BlocksToF32<Q4Min>,
    .q5_0_to_f32 = BlocksToF32<Q5>,
    .q5_1_to_f32 = BlocksToF32<Q5Min>,
    .f32_to_f16 = F32ToF16,
    .f32_to_bf16 = F32ToBf16Generic,
    .binary = BinaryGeneric,
    .act = Act,
    .norm = NormGeneric,
    .soft_max = SoftMaxWith<ExpShiftedSum16>,
    .rope = RopeRows<RopeRow>,
};

}  // namespace tessera::cpu_avx512
