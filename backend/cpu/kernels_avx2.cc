// The AVX2 kernels (SimdLevel::kAvx2), compiled with -mavx2 -mfma -mf16c.
// Quantized products take one 32-value block per 256-bit register (against
// one column, half of two blocks: BlockQuadColumn; K-quants against one
// column: kernels_kquant_column_avx2.inc): maddubs (u8 x s8 pairs) then
// madd to 32-bit sums.

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_levels.h"
#include "graph/block_quant.h"
#include "graph/kquant.h"
#include "graph/type.h"

namespace tessera::cpu_avx2 {
namespace {

#include "backend/cpu/kernels_generic.inc"

void F16ToF32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) y[i] = _cvtsh_ss(x[i]);
}

void F32ToF16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(y + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) y[i] = Fp32ToFp16(x[i]);
}

float HorizontalSum(__m128 s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float HorizontalSum(__m256 v) {
  return HorizontalSum(
      _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

// Per weight type: Load gives a block's weights as bytes for maddubs and
// Dot the 32-bit block sums against activations q, such that
//   contribution = dw * (da * Dot - kOffset * s)
// with s the activation block's d * sum(q); types with a minimum m per
// block (kHasMin) contribute dw * da * Dot + m * s instead.
struct Q8 {
  using Block = BlockQ8_0;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kHasMin = false;
  struct W {
    __m256i abs;   // |w|
    __m256i sign;  // w (its sign is applied to the activations)
  };
  static W Load(const Block& b) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
    return {_mm256_abs_epi8(w), w};
  }
  static __m256i Dot(const W& w, __m256i q) {
    const __m256i p = _mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(q, w.sign));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
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

// Byte i is 16 where bit 32w + i of `bits` is set, else 0 (w: the 32-bit
// word of `bits` to take, 0 or 1).
__m256i FifthBitBytes(uint64_t bits, int w) {
  // Byte i of `spread` is byte 4w + i / 8 of `bits`; one bit of it per byte.
  const int64_t at = 0x0404040404040404 * w;
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi64x(static_cast<int64_t>(bits)),
      _mm256_set_epi64x(0x0303030303030303 + at, 0x0202020202020202 + at,
                        0x0101010101010101 + at, at));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Nibbles with the fifth bits of Q5 blocks: byte i gains 16 where bit i of
// the 32-bit word at qh is set.
__m256i FiveBitLevels(const uint8_t* qs, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return _mm256_or_si256(Nibbles(qs), FifthBitBytes(bits, 0));
}

// Weights stored as unsigned levels (u = w / dw + kOffset, or (w - m) / dw).
struct Levels {
  __m256i u;
};

inline __m256i LevelDot(const Levels& w, __m256i q) {
  const __m256i p = _mm256_maddubs_epi16(w.u, q);
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

struct Q4 {
  using Block = BlockQ4_0;
  static constexpr float kOffset = 8.0f;
  static constexpr bool kHasMin = false;
  using W = Levels;
  static W Load(const Block& b) { return {Nibbles(b.qs)}; }
  static __m256i Dot(const W& w, __m256i q) { return LevelDot(w, q); }
};

struct Q5 {
  using Block = BlockQ5_0;
  static constexpr float kOffset = 16.0f;
  static constexpr bool kHasMin = false;
  using W = Levels;
  static W Load(const Block& b) { return {FiveBitLevels(b.qs, b.qh)}; }
  static __m256i Dot(const W& w, __m256i q) { return LevelDot(w, q); }
};

struct Q4Min {
  using Block = BlockQ4_1;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kHasMin = true;
  using W = Levels;
  static W Load(const Block& b) { return {Nibbles(b.qs)}; }
  static __m256i Dot(const W& w, __m256i q) { return LevelDot(w, q); }
};

struct Q5Min {
  using Block = BlockQ5_1;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kHasMin = true;
  using W = Levels;
  static W Load(const Block& b) { return {FiveBitLevels(b.qs, b.qh)}; }
  static __m256i Dot(const W& w, __m256i q) { return LevelDot(w, q); }
};

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
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    }
    // Each of the 8 lanes carries 1/8 of the block's offset or minimum term.
    const __m256 offset =
        _mm256_set1_ps(T::kHasMin ? 1.0f / 8.0f : T::kOffset / 8.0f);
    for (int64_t b = 0; b < nb; ++b) {
      typename T::W wv[R];
      __m256 dw[R];
      __m256 mw[R];
      for (int r = 0; r < R; ++r) {
        prefetch(w[r] + b, b * kBlockBytes);
        wv[r] = T::Load(w[r][b]);
        dw[r] = _mm256_set1_ps(_cvtsh_ss(w[r][b].d));
        if constexpr (T::kHasMin) mw[r] = _mm256_set1_ps(_cvtsh_ss(w[r][b].m));
      }
      for (int c = 0; c < C; ++c) {
        const __m256i qv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[c] + 32 * b));
        const __m256 da = _mm256_broadcast_ss(d[c] + b);
        const __m256 sa = _mm256_mul_ps(_mm256_broadcast_ss(d[c] + nb + b), offset);
        for (int r = 0; r < R; ++r) {
          const __m256 sum = _mm256_cvtepi32_ps(T::Dot(wv[r], qv));
          if constexpr (T::kHasMin) {
            acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(sum, da), dw[r],
                                        _mm256_fmadd_ps(sa, mw[r], acc[r][c]));
          } else {
            acc[r][c] =
                _mm256_fmadd_ps(_mm256_fmsub_ps(sum, da, sa), dw[r], acc[r][c]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        a.dst[(c0 + c) * a.dst_col_stride + r0 + r] = HorizontalSum(acc[r][c]);
      }
    }
  }
};

// One block's contribution to a product with one activation column: the
// last blocks of a row that fill no step of BlockQuadColumn.
template <typename T>
float BlockDot(const typename T::Block& w, const int8_t* q, float da,
               float sa) {
  const __m256i dot = T::Dot(
      T::Load(w), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  return BlockTerm<T>(w, HorizontalSum(_mm256_cvtepi32_ps(dot)), da, sa);
}

// Q4_0, Q4_1, Q5_0 and Q5_1 (T: Q4, Q4Min, Q5, Q5Min) against one
// activation column (a decode step's matrix-vector product), up to four
// rows at a time, four blocks per step, in fewer instructions per block
// than QuantKernel's tiles:
//  - Two blocks' 16 nibble bytes share a register, the first block in the
//    low 128 bits. Their low nibbles meet the two blocks' first 16
//    activation values and their high nibbles the last 16 (regrouped once
//    per step for every row); the two maddubs add in 16 bits (at most 2 x
//    2 x 31 x 127) and one madd leaves each block's dot product in four
//    32-bit lanes of its own. Q5 fifth bits join the nibbles as bytes of
//    16 from one 32-bit word per register (FourBlockWords: the first or
//    last 16 bits of each block's qh).
//  - A row's four scales (and minimums) are put together in a
//    general-purpose register from 16-bit loads and converted in one
//    instruction, multiplied by the activation's scales, and spread over
//    each block's lanes with one permute. The activation block's scaled sum
//    times dw (the levels are w + kOffset) or times mw is accumulated per
//    row, four blocks at once, and taken off or added at the end.
// bench/ops --simd=avx2 MUL_MAT n=1 (m=4096, k=14336) on a 2-core Zen 4 VM,
// in us with QuantKernel's tiles and with this: q4_0 1,018-1,040 and
// 660-680, q4_1 1,512-3,031 and 786-849, q5_0 1,746-1,776 and 1,284-1,302,
// q5_1 1,984-2,008 and 1,367-1,375.
template <typename T, int R>
void BlockQuadColumn(const QuantMatMulArgs& a, int64_t r0) {
  using Block = typename T::Block;
  constexpr int kBlockBytes = sizeof(Block);
  constexpr int kQs = offsetof(Block, qs);
  constexpr bool kFifthBits = requires(const Block& x) { x.qh; };
  const int64_t nb = a.k / 32;
  const char* w[R];
  for (int r = 0; r < R; ++r) w[r] = a.w + (r0 + r) * a.w_row_bytes;
  const int8_t* q = reinterpret_cast<const int8_t*>(a.act);
  const float* da = reinterpret_cast<const float*>(a.act + a.k);
  const float* sa = da + nb;
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  // Lanes 0..3 of pair p: block 2p's scale; lanes 4..7: block 2p + 1's.
  const __m256i spread[2] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
                             _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)};
  const TilePrefetch<R> prefetch(nb * kBlockBytes, a.w_row_bytes);
  __m256 acc[R];
  __m128 offset[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    offset[r] = _mm_setzero_ps();
  }
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    // Pair p (blocks b + 2p and b + 2p + 1): the blocks' first 16 values
    // (q_lo) and their last 16 (q_hi).
    __m256i q_lo[2], q_hi[2];
    for (int p = 0; p < 2; ++p) {
      const int8_t* pair = q + 32 * (b + 2 * p);
      const __m256i x0 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair));
      const __m256i x1 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair + 32));
      q_lo[p] = _mm256_permute2x128_si256(x0, x1, 0x20);
      q_hi[p] = _mm256_permute2x128_si256(x0, x1, 0x31);
    }
    const __m128 act_d = _mm_loadu_ps(da + b);
    const __m128 act_s = _mm_loadu_ps(sa + b);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int64_t at = b * kBlockBytes;
      const char* blocks = w[r] + at;
      prefetch.template Lines<4 * kBlockBytes>(blocks, at, r);
      // The four blocks' d (and m) as F16 words 0..3.
      auto words = [&](int field) {
        return _mm_cvtsi64_si128(
            static_cast<int64_t>(FourBlockWords(blocks, kBlockBytes, field)));
      };
      const __m128 dw = _mm_cvtph_ps(words(offsetof(Block, d)));
      __m128 mw = dw;
      if constexpr (T::kHasMin) mw = _mm_cvtph_ps(words(offsetof(Block, m)));
      offset[r] = _mm_fmadd_ps(mw, act_s, offset[r]);
      // With fifth bits: those of the blocks' first 16 values (bits 16j..
      // of `first` for block j) and of their last 16 (`last`); pair p's
      // are 32-bit word p.
      uint64_t first = 0, last = 0;
      if constexpr (kFifthBits) {
        first = FourBlockWords(blocks, kBlockBytes, offsetof(Block, qh));
        last = FourBlockWords(blocks, kBlockBytes, offsetof(Block, qh) + 2);
      }
      const __m256 scales = _mm256_castps128_ps256(_mm_mul_ps(dw, act_d));
      for (int p = 0; p < 2; ++p) {
        const char* qs = blocks + 2 * p * kBlockBytes + kQs;
        const __m256i nibbles = _mm256_inserti128_si256(
            _mm256_castsi128_si256(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + kBlockBytes)),
            1);
        __m256i lo = _mm256_and_si256(nibbles, low);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(nibbles, 4), low);
        if constexpr (kFifthBits) {
          lo = _mm256_or_si256(lo, FifthBitBytes(first, p));
          hi = _mm256_or_si256(hi, FifthBitBytes(last, p));
        }
        const __m256i sums = _mm256_madd_epi16(
            _mm256_add_epi16(_mm256_maddubs_epi16(lo, q_lo[p]),
                             _mm256_maddubs_epi16(hi, q_hi[p])),
            ones);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums),
                                 _mm256_permutevar8x32_ps(scales, spread[p]),
                                 acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float sum = HorizontalSum(acc[r]) + OffsetTerm<T>(HorizontalSum(offset[r]));
    const auto* row = reinterpret_cast<const Block*>(w[r]);
    for (int64_t i = b; i < nb; ++i) {
      sum += BlockDot<T>(row[i], q + 32 * i, da[i], sa[i]);
    }
    a.dst[r0 + r] = sum;
  }
}

// acc plus the eight 32-bit sums of adjacent 16-bit products p * s.
__m256i KMaddAcc(__m256i acc, __m256i p, __m256i s) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
}

// Two columns: a 2 x 2 tile's eight float and integer accumulators take
// half of the sixteen registers, leaving the rest to levels and scales.
constexpr int kKTileCols = 2;

#include "backend/cpu/kernels_kquant_x86.inc"
#include "backend/cpu/kernels_kquant_column_avx2.inc"

struct FloatVec {
  using V = __m256;
  static constexpr int kWidth = 8;
  // Attention's tiles (kernels_attn_x86.inc) of 4 queries by 3 keys or 3
  // value vectors: with those 3 vectors and one more they fill the 16
  // registers, and 12 chains of FMAs hide the FMAs' latency where 8 did
  // not. On one thread of a Zen 4 VM, 4 queries against 4096 F16 keys of
  // 128 values took 33.7 ns per key with 8 accumulators and 25.3 with 12.
  static constexpr int kMaxAcc = 12;
  // As many rows as the sixteen registers hold with their accumulators,
  // weight vectors and a column vector (at most 4), and at least two, so
  // that each column vector feeds two products even where accumulators
  // spill. On 2 threads of a Zen 4 VM: F16 4096 x 4096 weights took 0.73
  // and 0.84 ms for n = 3 and 4 this way, 1.05 and 1.30 ms with the 8 / C
  // rows before; bench/ops MUL_MAT n=8 (m=4096, k=14336) f16 7.4-7.6 and
  // f32 8.8-9.0 ms with two rows, 9.1 and 15.3 ms with one. The same
  // whatever the weights' width.
  static constexpr int MatVecRows(int cols, int /*weight_bytes*/) {
    return std::clamp(15 / (cols + 1), 2, 4);
  }
  static V Zero() { return _mm256_setzero_ps(); }
  static bool AnyZero(V v) {
    return _mm256_movemask_ps(_mm256_cmp_ps(v, Zero(), _CMP_EQ_OQ)) != 0;
  }
  static V Broadcast(float x) { return _mm256_set1_ps(x); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float Sum(V v) { return HorizontalSum(v); }
  // Sum(v[i]) in float i for 8 vectors, as a tree of adds that transposes
  // as it goes (21 instructions; 8 reductions take about 56): the 128-bit
  // halves of two vectors, then pairs within the halves. Float 4k + e of
  // the result sums the first step's input 2e + k; taking v[4k + e] as that
  // input puts Sum(v[i]) in float i.
  [[gnu::always_inline]] static V SumEach(const V* v) {
    V pairs[4];  // half k: four partial sums of one vector
    for (int i = 0; i < 4; ++i) {
      const V a = v[i];      // input 2i
      const V b = v[4 + i];  // input 2i + 1
      pairs[i] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20),
                               _mm256_permute2f128_ps(a, b, 0x31));
    }
    V halves[2];  // half k: two partial sums each of two vectors
    for (int i = 0; i < 2; ++i) {
      const V a = pairs[2 * i];
      const V b = pairs[2 * i + 1];
      halves[i] =
          _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
    }
    const V low =
        _mm256_shuffle_ps(halves[0], halves[1], _MM_SHUFFLE(1, 0, 1, 0));
    const V high =
        _mm256_shuffle_ps(halves[0], halves[1], _MM_SHUFFLE(3, 2, 3, 2));
    return _mm256_add_ps(low, high);
  }
  static V LoadF32(const float* p) { return _mm256_loadu_ps(p); }
  static void StoreF32(float* p, V v) { _mm256_storeu_ps(p, v); }
  // The first n (0..kWidth) floats at p, the rest 0; and their store.
  static __m256i FirstMask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V LoadFirst(const float* p, int n) {
    return _mm256_maskload_ps(p, FirstMask(n));
  }
  static void StoreFirst(float* p, V v, int n) {
    _mm256_maskstore_ps(p, FirstMask(n), v);
  }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  // a * b - c, rounded once.
  static V FmaSub(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }
  // Each pair of floats (2i, 2i + 1) swapped.
  static V SwapPairs(V v) {
    return _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1));
  }
  // v[i]'s float j becomes v[j]'s float i: pairs of rows interleaved, then
  // quads, then the 128-bit halves.
  static void Transpose(V (&v)[kWidth]) {
    V t[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    V u[8];  // u[4i + m], half L: float m + 4L of rows 4i..4i + 3
    for (int i = 0; i < 2; ++i) {
      u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
      u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
      u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
      u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int m = 0; m < 4; ++m) {
      v[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
      v[m + 4] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    }
  }
  static V LoadF16(const uint16_t* p) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V LoadBF16(const uint16_t* p) {
    const __m256i h = _mm256_cvtepu16_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
  static V LoadI8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  // 8 levels less `offset`: the low or high nibbles of 8 bytes, plus 16
  // where bit i of `fifth` is set.
  static V LoadNibbles(const uint8_t* p, bool high, int offset) {
    return Levels(Nibbles(p, high), offset);
  }
  static V LoadNibbles(const uint8_t* p, bool high, uint32_t fifth,
                       int offset) {
    const __m128i bit = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0,
                                      0, 0, 0, 0, 0);
    const __m128i set = _mm_cmpeq_epi8(
        _mm_and_si128(_mm_set1_epi8(static_cast<char>(fifth)), bit), bit);
    return Levels(_mm_add_epi8(Nibbles(p, high),
                               _mm_and_si128(set, _mm_set1_epi8(16))),
                  offset);
  }
  static __m128i Nibbles(const uint8_t* p, bool high) {
    __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    if (high) bytes = _mm_srli_epi16(bytes, 4);
    return _mm_and_si128(bytes, _mm_set1_epi8(0x0F));
  }
  static V Levels(__m128i bytes, int offset) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
        _mm_sub_epi8(bytes, _mm_set1_epi8(static_cast<char>(offset)))));
  }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
};

#include "backend/cpu/kernels_mat_vec_x86.inc"
#include "backend/cpu/kernels_rope_x86.inc"

// Use FloatVec and the readers of kernels_mat_vec_x86.inc.
#include "backend/cpu/kernels_attn_x86.inc"
#include "backend/cpu/kernels_float_gemm_x86.inc"

void MulMatQ8(const QuantMatMulArgs& a) { RunTiles<QuantKernel<Q8>, 2, 4>(a); }
void MulMatQ4(const QuantMatMulArgs& a) { RunTiles<QuantKernel<Q4>, 2, 4>(a); }
void MulMatQ5(const QuantMatMulArgs& a) { RunTiles<QuantKernel<Q5>, 2, 4>(a); }
void MulMatQ4Min(const QuantMatMulArgs& a) {
  RunTiles<QuantKernel<Q4Min>, 2, 4>(a);
}
void MulMatQ5Min(const QuantMatMulArgs& a) {
  RunTiles<QuantKernel<Q5Min>, 2, 4>(a);
}

// Blocks of 32 levels (T::Load) as floats, equal bit for bit to the
// reference dequantizers: (level - kOffset) * d, or d * level + m (whose
// product is exact, so fusing it changes nothing).
template <typename T>
void BlocksToF32(const void* x, float* y, int64_t n) {
  const auto* blocks = static_cast<const typename T::Block*>(x);
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m256i u = T::Load(blocks[b]).u;
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(blocks[b].d));
    const __m128i halves[2] = {_mm256_castsi256_si128(u),
                               _mm256_extracti128_si256(u, 1)};
    for (int q = 0; q < 4; ++q) {
      const __m128i bytes =
          q % 2 == 0 ? halves[q / 2] : _mm_srli_si128(halves[q / 2], 8);
      const __m256i level = _mm256_cvtepu8_epi32(bytes);
      __m256 v;
      if constexpr (T::kHasMin) {
        v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(level), d,
                            _mm256_set1_ps(_cvtsh_ss(blocks[b].m)));
      } else {
        const __m256i offset = _mm256_set1_epi32(static_cast<int>(T::kOffset));
        v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(level, offset)),
                          d);
      }
      _mm256_storeu_ps(y + 32 * b + 8 * q, v);
    }
  }
}

}  // namespace

const CpuKernels kKernels = {
    .level = SimdLevel::kAvx2,
    .quantize_act = QuantizeActGeneric,
    .quantize_act_k = QuantizeActKGeneric,
    .mul_mat_q8_0 = MulMatQ8,
    .mul_mat_q4_0 = MulMatColumns<BlockQuadColumn<Q4, kVecRows>,
                                  BlockQuadColumn<Q4, 1>, MulMatQ4>,
    .mul_mat_q4_1 = MulMatColumns<BlockQuadColumn<Q4Min, kVecRows>,
                                  BlockQuadColumn<Q4Min, 1>, MulMatQ4Min>,
    .mul_mat_q5_0 = MulMatColumns<BlockQuadColumn<Q5, kVecRows>,
                                  BlockQuadColumn<Q5, 1>, MulMatQ5>,
    .mul_mat_q5_1 = MulMatColumns<BlockQuadColumn<Q5Min, kVecRows>,
                                  BlockQuadColumn<Q5Min, 1>, MulMatQ5Min>,
    .mul_mat_q2_k = MulMatColumns<KGroupColumn<Q2KColumn, kVecRows>,
                                  KGroupColumn<Q2KColumn, 1>, MulMatQ2K>,
    .mul_mat_q3_k = MulMatColumns<KGroupColumn<Q3KColumn, kVecRows>,
                                  KGroupColumn<Q3KColumn, 1>, MulMatQ3K>,
    .mul_mat_q4_k = MulMatColumns<KAffineColumn<BlockQ4_K, kVecRows>,
                                  KAffineColumn<BlockQ4_K, 1>, MulMatQ4K>,
    .mul_mat_q5_k = MulMatColumns<KAffineColumn<BlockQ5_K, kVecRows>,
                                  KAffineColumn<BlockQ5_K, 1>, MulMatQ5K>,
    .mul_mat_q6_k = MulMatColumns<KGroupColumn<Q6KColumn, kVecRows>,
                                  KGroupColumn<Q6KColumn, 1>, MulMatQ6K>,
    .mat_vec_f32 = MatVec<F32Weights>,
    .mat_vec_f16 = MatVec<F16Weights>,
    .mat_vec_bf16 = MatVec<BF16Weights>,
    .gemm_f32 = FloatGemm<F32Weights>,
    .gemm_f16 = FloatGemm<F16Weights>,
    .gemm_bf16 = FloatGemm<BF16Weights>,
    .attn_block = AttnByTypes<AttnGrouped>,
    .f16_to_f32 = F16ToF32,
    .bf16_to_f32 = Bf16ToF32Generic,
    .q8_0_to_f32 = Q8_0ToF32Generic,
    .q4_0_to_f32 = BlocksToF32<Q4>,
    .q4_1_to_f32 = BlocksToF32<Q4Min>,
    .q5_0_to_f32 = BlocksToF32<Q5>,
    .q5_1_to_f32 = BlocksToF32<Q5Min>,
    .f32_to_f16 = F32ToF16,
    .f32_to_bf16 = F32ToBf16Generic,
    .binary = BinaryGeneric,
    .act = ActGeneric,
    .norm = NormGeneric,
    .soft_max = SoftMaxGeneric,
    .rope = RopeRows<RopeRow>,
};

}  // namespace tessera::cpu_avx2
