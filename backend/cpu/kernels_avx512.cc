// The AVX-512 kernels (SimdLevel::kAvx512), compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx512vnni (and the AVX2 flags). The products of
// 32-value blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) take two 32-value blocks per
// 512-bit register and use VNNI dpbusd (u8 x s8 sums of four) for the integer
// dot products; an odd last block goes through the 256-bit form. The K-quant
// products (kernels_kquant_x86.inc) scale their 16-bit pair sums with VNNI
// vpdpwssd; Q3_K, Q4_K, Q5_K and Q6_K against one column (decode) do so in
// 512-bit registers (KAffineColumn, SymmetricKColumn).

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
// term.
template <typename T>
struct QuantKernel : TileDispatch<QuantKernel<T>> {
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

// [p[0], p[1]] four times.
__m256 FloatPairs(const float* p) {
  return _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(FloatPair(p))));
}

// One block's contribution to a product with one activation column, in
// 256 bits: the last blocks of a row that fill no step of the column
// kernels below.
template <typename T>
float BlockDot(const typename T::Block& w, const int8_t* q, float da,
               float sa) {
  const __m256i dot = _mm256_dpbusd_epi32(
      _mm256_setzero_si256(), T::Load1(w),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  const float levels = HorizontalSum(_mm256_cvtepi32_ps(dot));
  const float dw = _cvtsh_ss(w.d);
  if constexpr (T::kHasMin) return dw * da * levels + _cvtsh_ss(w.m) * sa;
  return dw * (da * levels - T::kOffset * sa);
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
  const int64_t nb = a.k / 32;
  const char* w[4];
  for (int r = 0; r < 4; ++r) {
    w[r] = a.w + (r0 + std::min(r, R - 1)) * a.w_row_bytes;
  }
  const int8_t* q = reinterpret_cast<const int8_t*>(a.act);
  const float* da = reinterpret_cast<const float*>(a.act + a.k);
  const float* sa = da + nb;
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
    const __m512 act_s = _mm512_broadcast_f32x4(_mm_loadu_ps(sa + b));
    if constexpr (T::kHasMin) {
      const __m512 mw = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(words, 1));
      offset = _mm512_fmadd_ps(mw, act_s, offset);
    } else {
      offset = _mm512_fmadd_ps(dw, act_s, offset);
    }
    const __m512 scales =
        _mm512_mul_ps(dw, _mm512_broadcast_f32x4(_mm_loadu_ps(da + b)));
    // The activation's 128 values as the blocks' first 16 values (q_lo)
    // and their last 16 (q_hi).
    const __m512i q0 = _mm512_loadu_si512(q + 32 * b);
    const __m512i q1 = _mm512_loadu_si512(q + 32 * b + 64);
    const __m512i q_lo = _mm512_shuffle_i64x2(q0, q1, 0x88);
    const __m512i q_hi = _mm512_shuffle_i64x2(q0, q1, 0xDD);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      prefetch.template Lines<4 * kBlockBytes>(w[r] + at, at);
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
  alignas(64) float offsets[16];
  _mm512_store_ps(offsets, offset);
  for (int r = 0; r < R; ++r) {
    const float* o = offsets + 4 * r;
    const float rows_offset = (o[0] + o[1]) + (o[2] + o[3]);
    float sum = _mm512_reduce_add_ps(acc[r]) +
                (T::kHasMin ? rows_offset : -T::kOffset * rows_offset);
    const Block* row = reinterpret_cast<const Block*>(w[r]);
    for (int64_t i = b; i < nb; ++i) {
      sum += BlockDot<T>(row[i], q + 32 * i, da[i], sa[i]);
    }
    a.dst[r0 + r] = sum;
  }
}

// Q5_0 and Q5_1 (T: Q5, Q5Min) against one activation column, up to four
// rows at a time, two blocks per step, in fewer instructions per block than
// QuantKernel's tiles (which spend about 11 per row and block pair on the
// 512-bit ports, enough to hold the product below a plain read of its
// weights):
//  - The rows' scales are gathered into one vector per step (dw of row r,
//    block b + j in float 2r + j; the minimums mw likewise in floats
//    8..15), multiplied by the activation's scales there, and spread over a
//    row's lanes with one permute.
//  - The activation block's scaled sum times kOffset dw (the levels are w +
//    kOffset) or times mw is accumulated for all rows at once, and taken
//    off or added at the end.
// bench/ops MUL_MAT n=1 (m=4096, k=14336) took, with QuantKernel's tiles
// and with this, on a 2-core Sapphire Rapids-class VM (both prefetching 16
// KiB ahead of each row): q5_0 933-935 and 872-877 us, q5_1 1,208-1,229 and
// 809-896 us.
template <typename T, int R>
void BlockPairColumn(const QuantMatMulArgs& a, int64_t r0) {
  static_assert(R >= 1 && R <= 4, "two floats per row in 256 bits");
  using Block = typename T::Block;
  const int64_t nb = a.k / 32;
  const Block* w[4];
  for (int r = 0; r < 4; ++r) {
    w[r] = reinterpret_cast<const Block*>(
        a.w + (r0 + std::min(r, R - 1)) * a.w_row_bytes);
  }
  const int8_t* q = reinterpret_cast<const int8_t*>(a.act);
  const float* da = reinterpret_cast<const float*>(a.act + a.k);
  const float* sa = da + nb;
  // Word 0 of the 32 bytes at block b is its d (word 1 the m of types
  // with minimums), word sizeof(Block) / 2 block b + 1's; rows 0 and 2 in
  // the low 256 bits of their source, 1 and 3 in the high. Types without
  // minimums leave floats 8..15 unused.
  constexpr int16_t kNext = sizeof(Block) / 2;
  alignas(64) static constexpr int16_t kScaleWords[32] = {
      0, kNext,     16, 16 + kNext, 32, 32 + kNext, 48, 48 + kNext,
      1, 1 + kNext, 17, 17 + kNext, 33, 33 + kNext, 49, 49 + kNext};
  const __m512i scale_words = _mm512_load_si512(kScaleWords);
  // Row r's lanes: block b's values 0..31, then block b + 1's.
  __m512i spread[R];
  for (int r = 0; r < R; ++r) {
    spread[r] = _mm512_set_epi32(1 + 2 * r, 1 + 2 * r, 1 + 2 * r, 1 + 2 * r,
                                 1 + 2 * r, 1 + 2 * r, 1 + 2 * r, 1 + 2 * r,
                                 2 * r, 2 * r, 2 * r, 2 * r, 2 * r, 2 * r,
                                 2 * r, 2 * r);
  }
  constexpr int64_t kBlockBytes = sizeof(Block);
  const TilePrefetch<R> prefetch(nb * kBlockBytes, a.w_row_bytes);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  __m256 offset = _mm256_setzero_ps();
  auto row_pair = [&](int r, int64_t b) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r] + b))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r + 1] + b)), 1);
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512 gathered = _mm512_cvtph_ps(_mm512_castsi512_si256(
        _mm512_permutex2var_epi16(row_pair(0, b), scale_words,
                                  row_pair(2, b))));
    const __m256 dw = _mm512_castps512_ps256(gathered);
    const __m256 act_s = FloatPairs(sa + b);
    if constexpr (T::kHasMin) {
      const __m256 mw = _mm256_castpd_ps(
          _mm512_extractf64x4_pd(_mm512_castps_pd(gathered), 1));
      offset = _mm256_fmadd_ps(mw, act_s, offset);
    } else {
      offset = _mm256_fmadd_ps(dw, act_s, offset);
    }
    const __m256 d = _mm256_mul_ps(dw, FloatPairs(da + b));
    const __m512 scales = _mm512_castps256_ps512(d);
    const __m512i qv = _mm512_loadu_si512(q + 32 * b);
    for (int r = 0; r < R; ++r) {
      prefetch(w[r] + b, b * kBlockBytes);
      const __m512i dot =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), T::Load2(w[r] + b), qv);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                               _mm512_permutexvar_ps(spread[r], scales), acc[r]);
    }
  }
  alignas(32) float offsets[8];
  _mm256_store_ps(offsets, offset);
  for (int r = 0; r < R; ++r) {
    const float pair = offsets[2 * r] + offsets[2 * r + 1];
    float sum = _mm512_reduce_add_ps(acc[r]) +
                (T::kHasMin ? pair : -T::kOffset * pair);
    if (b < nb) sum += BlockDot<T>(w[r][b], q + 32 * b, da[b], sa[b]);
    a.dst[r0 + r] = sum;
  }
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

// acc plus the eight 32-bit sums of adjacent 16-bit products p * s, in
// one instruction.
__m256i KMaddAcc(__m256i acc, __m256i p, __m256i s) {
  return _mm256_dpwssd_epi32(acc, p, s);
}

// Four columns: thirty-two registers hold a 2 x 4 tile's accumulators.
constexpr int kKTileCols = 4;
// One column: tiles of four rows (kVecRows), which fit the registers.
constexpr int kKVecRows = kVecRows;

#include "backend/cpu/kernels_kquant_x86.inc"

// The operands of a K-quant product with one activation column (a
// KActRowBytes row): R weight rows from r0, the activation's levels, block
// scales and 16-value sums.
template <typename Block, int R>
struct KColumnOperands {
  KColumnOperands(const QuantMatMulArgs& a, int64_t r0)
      : super_blocks(a.k / kQK_K),
        q(reinterpret_cast<const int8_t*>(a.act)),
        da(reinterpret_cast<const float*>(a.act + a.k)),
        group_sums(reinterpret_cast<const int16_t*>(da + super_blocks)) {
    for (int r = 0; r < R; ++r) {
      w[r] = reinterpret_cast<const Block*>(a.w + (r0 + r) * a.w_row_bytes);
    }
  }
  int64_t super_blocks;
  const Block* w[R];
  const int8_t* q;
  const float* da;
  const int16_t* group_sums;
};

// Levels with high bits: low | ((bits >> shift) << 4 & mask), per byte
// (16-bit shifts by at most 7 keep each byte's low bits its own), the
// merge in one ternary-logic instruction (A | (B & C)).
__m512i MergeHighBits(__m512i low, __m512i bits, __m512i shift,
                      __m512i mask) {
  return _mm512_ternarylogic_epi32(
      low, _mm512_slli_epi16(_mm512_srlv_epi16(bits, shift), 4), mask, 0xF8);
}

// dst[r] = the sum of acc[r] plus the four floats of lane r of `lanes`
// (row r's term kept for all rows at once), for r < R.
template <int R>
void StoreRowSums(const __m512 (&acc)[R], __m512 lanes, float* dst) {
  alignas(64) float lane[16];
  _mm512_store_ps(lane, lanes);
  for (int r = 0; r < R; ++r) {
    const float* l = lane + 4 * r;
    dst[r] = _mm512_reduce_add_ps(acc[r]) + ((l[0] + l[1]) + (l[2] + l[3]));
  }
}

// The sub-blocks of the two 256-bit halves of KAffineColumn's level
// vector j.
constexpr int kHalfSubBlocks[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};

// Q4_K and Q5_K against one activation column (a decode step's
// matrix-vector product), up to four rows at a time, a super-block per step
// in 512-bit registers:
//  - 64 bytes of nibbles are the levels of four sub-blocks: the low
//    nibbles of sub-blocks 2c and 2c + 2, the high ones of 2c + 1 and
//    2c + 3 (c = 0, 2); Q5_K's fifth bits (bit s of qh[l] for value 32s +
//    l) join them from qh in both halves, each half shifted by its
//    sub-block. They meet the activation's bytes of the same sub-blocks,
//    regrouped once per super-block for every row. As in
//    kernels_kquant_x86.inc, maddubs makes 16-bit pair sums (levels up to
//    31) and vpdpwssd scales them by their sub-block's 6-bit scale and sums
//    them in 32 bits.
//  - The rows' headers (d, dmin and the 12 bytes of scales and mins) are
//    unpacked together, row r in 128-bit lane r, and the mins meet the
//    activation's sub-block sums for all rows at once.
// The 256-bit form of kernels_kquant_x86.inc, which products of several
// columns still use, spends about twice the instructions per super-block:
// bench/ops MUL_MAT n=1 (m=4096, k=14336) on a 2-core Sapphire
// Rapids-class VM took 1.01 ms (q4_K) and 1.33 ms (q5_K) with it, 0.77-0.80
// and 0.95-0.98 ms with this.
template <typename Block, int R>
void KAffineColumn(const QuantMatMulArgs& a, int64_t r0) {
  static_assert(R <= 4, "one 128-bit lane per row");
  constexpr bool kFifthBits = std::is_same_v<Block, BlockQ5_K>;
  const KColumnOperands<Block, R> in(a, r0);
  const TilePrefetch<R> prefetch(in.super_blocks * int64_t{sizeof(Block)},
                                 a.w_row_bytes);
  const Block* const* w = in.w;
  // Per level vector j: vpshufb indices (the same in every 128-bit lane of
  // a row's broadcast header) of its sub-blocks' scales as 16-bit words
  // (byte index, high byte zeroed by 0x80), and the bit of qh holding the
  // fifth bits of its halves.
  __m512i pick[4];
  __m512i fifth_shift[4];
  for (int j = 0; j < 4; ++j) {
    const int lo = kHalfSubBlocks[j][0];
    const int hi = kHalfSubBlocks[j][1];
    pick[j] = WordHalves512(0x8000 | lo, 0x8000 | hi);
    fifth_shift[j] = WordHalves512(lo, hi);
  }
  // The eight mins (bytes 8..15) as words.
  const __m512i min_words = _mm512_set_epi64(
      0x800F800E800D800C, 0x800B800A80098008, 0x800F800E800D800C,
      0x800B800A80098008, 0x800F800E800D800C, 0x800B800A80098008,
      0x800F800E800D800C, 0x800B800A80098008);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i fifth = _mm512_set1_epi8(0x10);
  const __m512i low6 = _mm512_set1_epi32(0x3F3F3F3F);
  const __m512i low4 = _mm512_set1_epi32(0x0F0F0F0F);
  const __m512i low2 = _mm512_set1_epi32(0x03030303);
  // Dword 3 of each lane shifts w2 right by 4 (the mins' high bits).
  const __m512i w2_shift = _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0,  //
                                            4, 0, 0, 0, 4, 0, 0, 0);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  __m512 min_acc = _mm512_setzero_ps();  // 4 lanes per row
  for (int64_t i = 0; i < in.super_blocks; ++i) {
    const int8_t* qi = in.q + kQK_K * i;
    __m512i act[4];
    for (int h = 0; h < 2; ++h) {
      const __m512i x0 = _mm512_loadu_si512(qi + 128 * h);
      const __m512i x1 = _mm512_loadu_si512(qi + 128 * h + 64);
      // 128-bit lanes [x0.0, x0.1, x1.0, x1.1] and [x0.2, x0.3, x1.2, x1.3].
      act[2 * h] = _mm512_shuffle_i64x2(x0, x1, 0x44);
      act[2 * h + 1] = _mm512_shuffle_i64x2(x0, x1, 0xEE);
    }
    // The activation's sub-block sums as 8 words in every lane.
    const __m256i pair_sums = _mm256_madd_epi16(
        _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(in.group_sums + (kQK_K / 16) * i)),
        _mm256_set1_epi16(1));
    const __m512i sub_sums =
        _mm512_broadcast_i32x4(_mm256_cvtepi32_epi16(pair_sums));
    // Headers, dwords [d | dmin << 16, w0, w1, w2] in lane r, unpacked to
    // [scales 0..3, scales 4..7, mins 0..3, mins 4..7] (UnpackKScalesMins).
    __m512i header = _mm512_setzero_si512();
    for (int r = 0; r < R; ++r) {
      const Block& b = w[r][i];
      prefetch.template Lines<sizeof(b)>(&b, i * int64_t{sizeof(b)});
      header = _mm512_inserti32x4(
          header, _mm_loadu_si128(reinterpret_cast<const __m128i*>(&b)), r);
    }
    const __m512i lows = _mm512_shuffle_epi32(header, _MM_PERM_DCDB);
    const __m512i highs = _mm512_shuffle_epi32(header, _MM_PERM_CCBB);
    const __m512i high_bits = _mm512_or_si512(
        _mm512_and_si512(_mm512_srlv_epi32(lows, w2_shift), low4),
        _mm512_slli_epi32(
            _mm512_and_si512(_mm512_srli_epi32(highs, 6), low2), 4));
    const __m512i unpacked = _mm512_mask_blend_epi32(
        0xAAAA, _mm512_and_si512(lows, low6), high_bits);
    // d * da of row r in float r * 4, dmin * da in every float of lane r.
    const __m512 da_i = _mm512_set1_ps(in.da[i]);
    const __m512 d = _mm512_mul_ps(
        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(header)), da_i);
    const __m512 dmin = _mm512_permute_ps(
        _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                          _mm512_srli_epi32(header, 16))),
                      da_i),
        0);
    const __m512i mins =
        _mm512_madd_epi16(_mm512_shuffle_epi8(unpacked, min_words), sub_sums);
    min_acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), dmin, min_acc);
    for (int r = 0; r < R; ++r) {
      const __m512i row = _mm512_shuffle_i32x4(unpacked, unpacked, 0x55 * r);
      __m512i sum = _mm512_setzero_si512();
      __m512i qh = _mm512_setzero_si512();
      if constexpr (kFifthBits) {
        qh = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r][i].qh)));
      }
      for (int h = 0; h < 2; ++h) {
        const __m512i raw = _mm512_loadu_si512(w[r][i].qs + 64 * h);
        __m512i level[2] = {
            _mm512_and_si512(raw, nibble),
            _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble)};
        for (int t = 0; t < 2; ++t) {
          const int j = 2 * h + t;
          if constexpr (kFifthBits) {
            level[t] = MergeHighBits(level[t], qh, fifth_shift[j], fifth);
          }
          sum = _mm512_dpwssd_epi32(sum,
                                    _mm512_maddubs_epi16(level[t], act[j]),
                                    _mm512_shuffle_epi8(row, pick[j]));
        }
      }
      acc[r] = _mm512_fmadd_ps(
          _mm512_cvtepi32_ps(sum),
          _mm512_permutexvar_ps(_mm512_set1_epi32(4 * r), d), acc[r]);
    }
  }
  StoreRowSums(acc, min_acc, a.dst + r0);
}

// Word w of the pair sums of values 64v .. 64v + 63 is in group
// 4v + w / 8 (a vpermw index per v).
struct Q6KGroupIndex {
  alignas(64) int16_t word[4][32];
};
constexpr Q6KGroupIndex kQ6KGroupOf = [] {
  Q6KGroupIndex index{};
  for (int v = 0; v < 4; ++v) {
    for (int w = 0; w < 32; ++w) {
      index.word[v][w] = static_cast<int16_t>(4 * v + w / 8);
    }
  }
  return index;
}();

// Q6_K's levels (SymmetricKColumn): 64 bytes of ql hold the low bits of
// 128 consecutive values, the low nibbles values 0..63 of their half and
// the high ones 64..127; the two high bits join from qh (broadcast to both
// halves, each shifted by its sub-block). Levels are w + 32 (0..63).
struct Q6KLevels {
  using Block = BlockQ6_K;
  static constexpr int kOffsetBits = 5;
  static __m256i Scales(const Block& b) {
    return _mm256_cvtepi8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
  }
  static void Levels(const Block& b, __m512i level[4]) {
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const __m512i top = _mm512_set1_epi8(0x30);
    // The qh bits of sub-blocks [4h, 4h + 1] (low nibbles) and [4h + 2,
    // 4h + 3] (high nibbles).
    const __m512i top_shift[2] = {WordHalves512(0, 2), WordHalves512(4, 6)};
    for (int h = 0; h < 2; ++h) {
      const __m512i raw = _mm512_loadu_si512(b.ql + 64 * h);
      const __m512i high = _mm512_broadcast_i64x4(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(b.qh + 32 * h)));
      const __m512i low[2] = {
          _mm512_and_si512(raw, nibble),
          _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble)};
      for (int t = 0; t < 2; ++t) {
        level[2 * h + t] = MergeHighBits(low[t], high, top_shift[t], top);
      }
    }
  }
};

// x with its high 256 bits shifted down by `bits` (16-bit shifts by at
// most 7 keep each byte's low bits its own).
__m512i HighHalfDown(__m512i x, int bits) {
  return _mm512_mask_blend_epi16(0xFFFF0000, x, _mm512_srli_epi16(x, bits));
}

// Q3_K's levels (SymmetricKColumn): the two low bits of vector v = 2h + p
// are bits 4p (its low half) and 4p + 2 (its high half) of qs[32h ..], its
// third bits bits 2v and 2v + 1 of hmask (both broadcast to the two
// halves). Levels are w + 4 (0..7); scales are the 6-bit ones less 32.
struct Q3KLevels {
  using Block = BlockQ3_K;
  static constexpr int kOffsetBits = 2;
  static __m256i Scales(const Block& b) { return Q3KScales(b.scales); }
  static void Levels(const Block& b, __m512i level[4]) {
    const __m512i three = _mm512_set1_epi8(3);
    const __m512i third = _mm512_set1_epi8(4);
    // Bit 2v of both halves: vector v's third bits.
    const __m512i hmask =
        HighHalfDown(_mm512_broadcast_i64x4(_mm256_loadu_si256(
                         reinterpret_cast<const __m256i*>(b.hmask))),
                     1);
    const __m512i thirds[4] = {_mm512_slli_epi16(hmask, 2), hmask,
                               _mm512_srli_epi16(hmask, 2),
                               _mm512_srli_epi16(hmask, 4)};
    for (int h = 0; h < 2; ++h) {
      // Bits 4p, 4p + 1 of both halves: vector 2h + p's low bits.
      const __m512i raw =
          HighHalfDown(_mm512_broadcast_i64x4(_mm256_loadu_si256(
                           reinterpret_cast<const __m256i*>(b.qs + 32 * h))),
                       2);
      const __m512i lows[2] = {raw, _mm512_srli_epi16(raw, 4)};
      for (int p = 0; p < 2; ++p) {
        // (low & 3) | (third & 4) in one ternary-logic instruction.
        level[2 * h + p] = _mm512_ternarylogic_epi32(
            _mm512_and_si512(lows[p], three), thirds[2 * h + p], third, 0xF8);
      }
    }
  }
};

// Q6_K and Q3_K (T: Q6KLevels, Q3KLevels), types with a signed scale per
// group of 16 and levels w + 2^kOffsetBits, against one activation column,
// up to four rows at a time, a super-block per step in 512-bit registers:
// level vector v holds values 64v .. 64v + 63 and meets 64 consecutive
// activation bytes in maddubs, vpdpwssd scales the pair sums by their
// group's scale (vpermw spreads 16 scales over 8 words each), and
// 2^kOffsetBits times the scaled group sums of the activation are taken
// off once per super-block. bench/ops MUL_MAT n=1 (m=4096, k=14336) took,
// with the 256-bit form of kernels_kquant_x86.inc and with this, on a
// 2-core Sapphire Rapids-class VM: q6_K 1.22-1.28 and 1.10 ms, q3_K
// 1.24-1.28 and 1.10-1.16 ms.
template <typename T, int R>
void SymmetricKColumn(const QuantMatMulArgs& a, int64_t r0) {
  using Block = typename T::Block;
  const KColumnOperands<Block, R> in(a, r0);
  const TilePrefetch<R> prefetch(in.super_blocks * int64_t{sizeof(Block)},
                                 a.w_row_bytes);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < in.super_blocks; ++i) {
    const int8_t* qi = in.q + kQK_K * i;
    const __m256i sums = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(in.group_sums + (kQK_K / 16) * i));
    for (int r = 0; r < R; ++r) {
      const Block& b = in.w[r][i];
      prefetch.template Lines<sizeof(b)>(&b, i * int64_t{sizeof(b)});
      const __m256i scale16 = T::Scales(b);
      const __m512i scales = _mm512_broadcast_i64x4(scale16);
      __m512i level[4];
      T::Levels(b, level);
      __m512i sum = _mm512_setzero_si512();
      for (int v = 0; v < 4; ++v) {
        sum = _mm512_dpwssd_epi32(
            sum,
            _mm512_maddubs_epi16(level[v], _mm512_loadu_si512(qi + 64 * v)),
            _mm512_permutexvar_epi16(_mm512_load_si512(kQ6KGroupOf.word[v]),
                                     scales));
      }
      const __m256i offset = _mm256_slli_epi32(
          _mm256_madd_epi16(scale16, sums), T::kOffsetBits);
      sum = _mm512_sub_epi32(sum, _mm512_zextsi256_si512(offset));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                               _mm512_set1_ps(_cvtsh_ss(b.d) * in.da[i]),
                               acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) a.dst[r0 + r] = _mm512_reduce_add_ps(acc[r]);
}

// Q2_K against one activation column, up to four rows at a time, a
// super-block per step. Byte l of the row's 64 bytes of qs, shifted right
// by 2t, holds in its two low bits the level of value 128 (l / 32) + 32t +
// l % 32, so level vector t covers values 32t .. 32t + 31 and 128 + 32t ..
// 128 + 32t + 31 and meets the activation regrouped that way (once per
// super-block for every row). Each 128-bit lane of vector t is one group
// of 16: lane k is group 8 (k / 2) + 2t + k % 2. Rather than scaling 16-bit
// pair sums (maddubs, a permute of the scales and vpdpwssd per vector, as
// SymmetricKColumn does), the levels become the scaled levels s * level
// (at most 45) by a table lookup: dword t of lane k holds [0, s, 2s, 3s]
// of that lane's group for vector t, and the index level + 4t picks from
// it with vpshufb; vpdpbusd then sums the products in 32 bits. A row's
// table is its 16 scale bytes broadcast to the lanes, one byte shuffle and
// one 16-bit multiply. The mins meet the activation's group sums for all
// four rows at once (row r in 128-bit lane r), as do the rows' d and dmin.
// About 25 512-bit instructions per row and super-block; a Zen 4 VM took
// 4.8 ns per row and super-block on one thread in L2 with this and 5.4 ns
// with the 256-bit tiles of kernels_kquant_x86.inc, and bench/ops MUL_MAT
// q2_K n=1 (m=4096, k=14336) took 554-648 us against 639-848.
template <int R>
void Q2KColumn(const QuantMatMulArgs& a, int64_t r0) {
  static_assert(R >= 1 && R <= 4, "one 128-bit lane per row");
  // Bytes 0 and 2 of dword t of lane k: the scale byte of that lane's
  // group for vector t; bytes 1 and 3 zero (index 0x80).
  static constexpr auto kTableIndex = [] {
    struct {
      alignas(64) int8_t byte[64];
    } x{};
    for (int k = 0; k < 4; ++k) {
      for (int t = 0; t < 4; ++t) {
        const int8_t group = static_cast<int8_t>(8 * (k / 2) + 2 * t + k % 2);
        int8_t* dword = x.byte + 16 * k + 4 * t;
        dword[0] = dword[2] = group;
        dword[1] = dword[3] = static_cast<int8_t>(0x80);
      }
    }
    return x;
  }();
  const KColumnOperands<BlockQ2_K, R> in(a, r0);
  const BlockQ2_K* w[4];
  for (int r = 0; r < 4; ++r) w[r] = in.w[std::min(r, R - 1)];
  const TilePrefetch<R> prefetch(in.super_blocks * int64_t{sizeof(BlockQ2_K)},
                                 a.w_row_bytes);
  const __m512i table_index = _mm512_load_si512(kTableIndex.byte);
  // Words [s, s] times [0x0100, 0x0302]: bytes [0, s, 2s, 3s].
  const __m512i multiples = _mm512_set1_epi32(0x03020100);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i three = _mm512_set1_epi8(3);
  __m512i vector_of[4];
  for (int t = 0; t < 4; ++t) vector_of[t] = _mm512_set1_epi8(4 * t);
  // Dword 3 of each lane: a row's d and dmin.
  const __m512i d_dmin_of = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0,  //
                                             0, 0, 0, 0, 15, 11, 7, 3);
  // dmin of row r in every float of lane r.
  const __m512i dmin_of = _mm512_set_epi32(7, 7, 7, 7, 5, 5, 5, 5,  //
                                           3, 3, 3, 3, 1, 1, 1, 1);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  __m512 min_acc = _mm512_setzero_ps();  // 4 lanes per row
  for (int64_t i = 0; i < in.super_blocks; ++i) {
    const int8_t* qi = in.q + kQK_K * i;
    const __m512i x0 = _mm512_loadu_si512(qi);
    const __m512i x1 = _mm512_loadu_si512(qi + 64);
    const __m512i x2 = _mm512_loadu_si512(qi + 128);
    const __m512i x3 = _mm512_loadu_si512(qi + 192);
    const __m512i act[4] = {
        _mm512_shuffle_i64x2(x0, x2, 0x44), _mm512_shuffle_i64x2(x0, x2, 0xEE),
        _mm512_shuffle_i64x2(x1, x3, 0x44), _mm512_shuffle_i64x2(x1, x3, 0xEE)};
    // Row r's 16 scale bytes (scale | min << 4) in lane r, and its last 16
    // bytes (ending in d and dmin) likewise; [d, dmin] of row r in floats 2r,
    // 2r + 1, times the activation's scale.
    __m512i packed = _mm512_setzero_si512();
    __m512i ends = _mm512_setzero_si512();
    for (int r = 0; r < 4; ++r) {
      const BlockQ2_K& b = w[r][i];
      if (r < R) prefetch.template Lines<sizeof(b)>(&b, i * int64_t{sizeof(b)});
      packed = _mm512_inserti32x4(
          packed, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)),
          r);
      ends = _mm512_inserti32x4(
          ends, _mm_loadu_si128(reinterpret_cast<const __m128i*>(&b + 1) - 1),
          r);
    }
    const __m512 d = _mm512_castps256_ps512(_mm256_mul_ps(
        _mm256_cvtph_ps(
            _mm512_castsi512_si128(_mm512_permutexvar_epi32(d_dmin_of, ends))),
        _mm256_set1_ps(in.da[i])));
    // The mins against the activation's group sums: groups 0..7 in the
    // low bytes' words, 8..15 in the high ones'.
    const __m512i mins = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
    const int16_t* sums = in.group_sums + (kQK_K / 16) * i;
    const __m512i zero = _mm512_setzero_si512();
    const __m512i min_dot = _mm512_dpwssd_epi32(
        _mm512_madd_epi16(_mm512_unpacklo_epi8(mins, zero),
                          _mm512_broadcast_i32x4(_mm_loadu_si128(
                              reinterpret_cast<const __m128i*>(sums)))),
        _mm512_unpackhi_epi8(mins, zero),
        _mm512_broadcast_i32x4(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(sums + 8))));
    min_acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(min_dot),
                               _mm512_permutexvar_ps(dmin_of, d), min_acc);
    for (int r = 0; r < R; ++r) {
      const __m512i spread = _mm512_shuffle_epi8(
          _mm512_broadcast_i32x4(_mm_loadu_si128(
              reinterpret_cast<const __m128i*>(w[r][i].scales))),
          table_index);
      const __m512i table =
          _mm512_mullo_epi16(_mm512_and_si512(spread, low4), multiples);
      const __m512i raw = _mm512_loadu_si512(w[r][i].qs);
      __m512i dot = _mm512_setzero_si512();
      for (int t = 0; t < 4; ++t) {
        // Level + 4t: (raw >> 2t & 3) | 4t.
        const __m512i index = _mm512_ternarylogic_epi32(
            _mm512_srli_epi16(raw, 2 * t), three, vector_of[t], 0xEA);
        dot =
            _mm512_dpbusd_epi32(dot, _mm512_shuffle_epi8(table, index), act[t]);
      }
      acc[r] = _mm512_fmadd_ps(
          _mm512_cvtepi32_ps(dot),
          _mm512_permutexvar_ps(_mm512_set1_epi32(2 * r), d), acc[r]);
    }
  }
  StoreRowSums(acc, min_acc, a.dst + r0);
}

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

// RopeGeneric 16 values at a time: NeoX pairs from the row's two halves;
// normal pairs (2i, 2i + 1) with each pair's cos and sin spread over its
// two lanes and the pair swapped in-lane, so that one fmaddsub gives x0 c -
// x1 s in the even lanes and x1 c + x0 s in the odd.
void Rope(const float* x, float* dst, int64_t n, int64_t pairs, bool neox,
          const float* cos, const float* sin) {
  int64_t i = 0;
  if (neox) {
    for (; i + 16 <= pairs; i += 16) {
      const __m512 x0 = _mm512_loadu_ps(x + i);
      const __m512 x1 = _mm512_loadu_ps(x + i + pairs);
      const __m512 c = _mm512_loadu_ps(cos + i);
      const __m512 s = _mm512_loadu_ps(sin + i);
      _mm512_storeu_ps(dst + i, _mm512_fmsub_ps(x0, c, _mm512_mul_ps(x1, s)));
      _mm512_storeu_ps(dst + i + pairs,
                       _mm512_fmadd_ps(x0, s, _mm512_mul_ps(x1, c)));
    }
  } else {
    const __m512i spread = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4,  //
                                            3, 3, 2, 2, 1, 1, 0, 0);
    auto spread_pairs = [&](const float* p) {
      return _mm512_permutexvar_ps(
          spread, _mm512_castps256_ps512(_mm256_loadu_ps(p)));
    };
    for (; i + 8 <= pairs; i += 8) {
      const __m512 v = _mm512_loadu_ps(x + 2 * i);
      const __m512 swapped = _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
      _mm512_storeu_ps(
          dst + 2 * i,
          _mm512_fmaddsub_ps(v, spread_pairs(cos + i),
                             _mm512_mul_ps(swapped, spread_pairs(sin + i))));
    }
  }
  RopeFrom(i, x, dst, n, pairs, neox, cos, sin);
}

// Products of one column by kColumn4 (tiles of kVecRows rows) and kColumn1
// (the last rows), of several by kernels_kquant_x86.inc's tiles (kTiles).
template <void (*kColumn4)(const QuantMatMulArgs&, int64_t),
          void (*kColumn1)(const QuantMatMulArgs&, int64_t),
          void (*kTiles)(const QuantMatMulArgs&)>
void MulMatColumns(const QuantMatMulArgs& a) {
  if (a.cols != 1) return kTiles(a);
  int64_t r = 0;
  for (; r + kVecRows <= a.rows; r += kVecRows) kColumn4(a, r);
  for (; r < a.rows; ++r) kColumn1(a, r);
}

struct FloatVec {
  using V = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kMaxAcc = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Broadcast(float x) { return _mm512_set1_ps(x); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float Sum(V v) { return _mm512_reduce_add_ps(v); }
  // sums[i] = Sum(v[i]) for 16 vectors, as a tree of adds that transposes
  // as it goes (45 instructions; 16 reductions take about 140): each step
  // halves the vectors and doubles the sums one vector carries, in 128-bit
  // lanes and then within them. Float 4k + e of the result sums the first
  // step's input 4e + k; taking v[4k + e] as that input puts Sum(v[i]) in
  // float i.
  static void SumEach(const V* v, float* sums) {
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
    _mm512_storeu_ps(sums, _mm512_add_ps(low, high));
  }
  static V LoadF32(const float* p) { return _mm512_loadu_ps(p); }
  static void StoreF32(float* p, V v) { _mm512_storeu_ps(p, v); }
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

// Uses FloatVec and the readers of kernels_mat_vec_x86.inc.
#include "backend/cpu/kernels_attn_x86.inc"

void MulMatQ8(const QuantMatMulArgs& a) { RunTiles<QuantKernel<Q8>, 2, 4>(a); }
void MulMatQ4(const QuantMatMulArgs& a) { RunTiles<QuantKernel<Q4>, 2, 4>(a); }
void MulMatQ5(const QuantMatMulArgs& a) { RunTiles<QuantKernel<Q5>, 2, 4>(a); }
void MulMatQ4Min(const QuantMatMulArgs& a) {
  RunTiles<QuantKernel<Q4Min>, 2, 4>(a);
}
void MulMatQ5Min(const QuantMatMulArgs& a) {
  RunTiles<QuantKernel<Q5Min>, 2, 4>(a);
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
    .mul_mat_q8_0 = MulMatQ8,
    .mul_mat_q4_0 = MulMatColumns<BlockQuadColumn<Q4, kVecRows>,
                                  BlockQuadColumn<Q4, 1>, MulMatQ4>,
    .mul_mat_q4_1 = MulMatColumns<BlockQuadColumn<Q4Min, kVecRows>,
                                  BlockQuadColumn<Q4Min, 1>, MulMatQ4Min>,
    .mul_mat_q5_0 = MulMatColumns<BlockPairColumn<Q5, kVecRows>,
                                  BlockPairColumn<Q5, 1>, MulMatQ5>,
    .mul_mat_q5_1 = MulMatColumns<BlockPairColumn<Q5Min, kVecRows>,
                                  BlockPairColumn<Q5Min, 1>, MulMatQ5Min>,
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
    .act = ActGeneric,
    .norm = NormGeneric,
    .soft_max = SoftMaxWith<ExpShiftedSum16>,
    .rope = Rope,
};

}  // namespace tessera::cpu_avx512
