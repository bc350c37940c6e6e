// The AMX level (SimdLevel::kAmx): the avx512bf16 table (its column
// packing included), plus products of BF16, F16, Q8_0 and Q4_0 weights with
// many columns on the tile units (see TileGemmArgs in kernels.h).
// Compiled with the AVX-512 flags and -mamx-tile -mamx-int8 -mamx-bf16
// -mavx512bf16.
//
// A tile product adds A (16 rows of 64 bytes) times B (rows of 16 32-bit
// words, each word two BF16 or four int8 consecutive values of one
// column of B) into C (16 x 16 F32 or int32 sums).
//  - BF16 and F16: A is 16 packed columns of src1 (rows of values, as they
//    lie) and B 16 weight rows regrouped into words (transposed in
//    registers, once per band of weights and chunk of k, then used against
//    every column group; an F16 weight as two BF16 parts, hi and lo, whose
//    sum is exact, each its own B), so C[c][r] is dst[c][r]: a destination
//    column's 16 rows are one tile row. C sums a chunk of k in F32 and is
//    loaded from and stored to the destination around each chunk.
//  - Q8_0 and Q4_0: A is 16 weight rows unpacked to bytes (Q4_0's levels
//    less 8) with their scales as F32, once per band and chunk, and B 16
//    packed columns; each 32-value block is one product into C (int32),
//    scaled by the weight rows' and the columns' scales and summed in F32
//    registers, in a pipeline over pairs of blocks (products, sums
//    stored, sums scaled an iteration later).
// Products go over k in chunks whose packed columns stay in the core's
// second-level cache (kChunkBytes); each band of weights is read once per
// chunk.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_levels.h"
#include "graph/type.h"

namespace tessera::cpu_amx {
namespace {

// The tile registers' shapes (ldtilecfg's 64-byte operand, palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Packed columns a chunk of k may take: about half a Sapphire Rapids
// core's 2 MiB second-level cache, leaving room for the weight band.
constexpr int64_t kChunkBytes = 1 << 20;

// Bytes of one 32-value block of a quantized band or column group: a
// 512-byte tile and 16 F32 scales.
constexpr int64_t kQuantTileBytes = 512 + 64;

#include "backend/cpu/kernels_bands_x86.inc"

// ---- BF16 ----------------------------------------------------------------

// Tiles 0-3: C for (column group, weight rows 0-15 / 16-31) x 2 groups;
// 4, 5: A for the two column groups; 6, 7: B for the two halves of rows.
void ConfigureBf16() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

// A result tile C[c][r] for columns [c0, c0 + nc) and rows [r0, r0 + nr)
// of dst: straight from and to dst when whole (16 x 16), else through
// `tmp`.
struct ResultTile {
  float* dst;
  int64_t stride;  // floats between columns
  int64_t nc;
  int64_t nr;
  float* tmp;  // 256 floats
  bool Whole() const { return nc == 16 && nr == 16; }
};

// Expands OP(t) for the tile t of 0-3 that `tile` names: GCC's tile
// intrinsics write their tile number into the instruction's text, so it
// must be a literal.
#define TESSERA_FOR_TILE(tile, OP) \
  switch (tile) {                  \
    case 0:                        \
      OP(0);                       \
      break;                       \
    case 1:                        \
      OP(1);                       \
      break;                       \
    case 2:                        \
      OP(2);                       \
      break;                       \
    default:                       \
      OP(3);                       \
      break;                       \
  }

void TileLoad(int tile, const void* p, int64_t stride) {
#define TESSERA_TILE_LOAD(t) _tile_loadd(t, p, stride)
  TESSERA_FOR_TILE(tile, TESSERA_TILE_LOAD)
#undef TESSERA_TILE_LOAD
}

void TileStore(int tile, void* p, int64_t stride) {
#define TESSERA_TILE_STORE(t) _tile_stored(t, p, stride)
  TESSERA_FOR_TILE(tile, TESSERA_TILE_STORE)
#undef TESSERA_TILE_STORE
}

void TileZero(int tile) {
#define TESSERA_TILE_ZERO(t) _tile_zero(t)
  TESSERA_FOR_TILE(tile, TESSERA_TILE_ZERO)
#undef TESSERA_TILE_ZERO
}

#undef TESSERA_FOR_TILE

void LoadResult(int tile, const ResultTile& t, bool first) {
  if (first) {
    TileZero(tile);
  } else if (t.Whole()) {
    TileLoad(tile, t.dst, t.stride * sizeof(float));
  } else {
    std::memset(t.tmp, 0, 1024);
    for (int64_t c = 0; c < t.nc; ++c) {
      std::memcpy(t.tmp + 16 * c, t.dst + c * t.stride, t.nr * sizeof(float));
    }
    TileLoad(tile, t.tmp, 64);
  }
}

void StoreResult(int tile, const ResultTile& t) {
  if (t.Whole()) {
    TileStore(tile, t.dst, t.stride * sizeof(float));
    return;
  }
  TileStore(tile, t.tmp, 64);
  for (int64_t c = 0; c < t.nc; ++c) {
    std::memcpy(t.dst + c * t.stride, t.tmp + 16 * c, t.nr * sizeof(float));
  }
}

// BF16 weights, or F16 weights as two BF16 products (hi and lo): columns
// rounded to BF16 against exact weights.
template <Type kWeights>
void TileMulMatFloat(const TileGemmArgs& a) {
  constexpr int64_t kTiles = kTilesPerStep<kWeights>;
  ConfigureBf16();
  const int64_t steps = a.k / 32;
  const int64_t groups = GroupsOf(a.cols);
  const int64_t group_bytes = static_cast<int64_t>(TileGroupBytes(kWeights, a.k));
  const int64_t chunk =
      std::clamp<int64_t>(kChunkBytes / (groups * 1024), 1, steps);
  char* band = a.scratch;
  // Four result tiles after the band.
  float* tmp = reinterpret_cast<float*>(a.scratch + steps * kTiles * 1024);
  for (int64_t s0 = 0; s0 < steps; s0 += chunk) {
    const int64_t s1 = std::min(steps, s0 + chunk);
    const bool first = s0 == 0;
    for (int64_t r0 = 0; r0 < a.rows; r0 += 32) {
      const int64_t nr = std::min<int64_t>(32, a.rows - r0);
      Regroup<kWeights>(a, r0, nr, s0, s1, band);
      for (int64_t g = 0; g < groups; g += 2) {
        const bool two = g + 1 < groups;
        ResultTile t[4];
        for (int i = 0; i < 4; ++i) {
          const int64_t c0 = (g + i / 2) * kTileCols;
          const int64_t rh = r0 + 16 * (i % 2);
          t[i] = ResultTile{a.dst + c0 * a.dst_col_stride + rh,
                            a.dst_col_stride,
                            std::clamp<int64_t>(a.cols - c0, 0, 16),
                            std::clamp<int64_t>(a.rows - rh, 0, 16),
                            tmp + 256 * i};
        }
        for (int i = 0; i < (two ? 4 : 2); ++i) LoadResult(i, t[i], first);
        const char* x0 = a.packed + g * group_bytes;
        const char* x1 = x0 + group_bytes;
        for (int64_t s = s0; s < s1; ++s) {
          const char* b = band + (s - s0) * kTiles * 1024;
          _tile_loadd(4, x0 + s * 1024, 64);
          if (two) _tile_loadd(5, x1 + s * 1024, 64);
          if constexpr (kWeights == Type::kF16) {
            _tile_loadd(6, b, 64);
            _tile_loadd(7, b + 1024, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (two) _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(0, 4, 7);
            if (two) _tile_dpbf16ps(2, 5, 7);
            _tile_loadd(6, b + 2048, 64);
            _tile_loadd(7, b + 3072, 64);
            _tile_dpbf16ps(1, 4, 6);
            if (two) _tile_dpbf16ps(3, 5, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (two) _tile_dpbf16ps(3, 5, 7);
          } else {
            _tile_loadd(6, b, 64);
            _tile_loadd(7, b + 1024, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (two) {
              _tile_dpbf16ps(2, 5, 6);
              _tile_dpbf16ps(3, 5, 7);
            }
          }
        }
        for (int i = 0; i < (two ? 4 : 2); ++i) {
          if (t[i].nr > 0) StoreResult(i, t[i]);
        }
      }
    }
  }
  _tile_release();
}

// ---- Q8_0 and Q4_0 -------------------------------------------------------

// Tiles 0-3: C for two pairs of blocks; 4, 5: A (16 rows of a block's 32
// bytes); 6, 7: B (8 rows of 16 columns' four bytes).
void ConfigureInt8() {
  TileConfig config;
  for (int t = 0; t < 4; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  for (int t = 4; t < 6; ++t) {
    config.colsb[t] = 32;
    config.rows[t] = 16;
    config.colsb[t + 2] = 64;
    config.rows[t + 2] = 8;
  }
  _tile_loadconfig(&config);
}

void PackQ8(const char* act, size_t act_row_bytes, int64_t cols, int64_t k,
            char* group) {
  const int64_t nb = k / 32;
  if (cols < kTileCols) std::memset(group, 0, TileGroupBytes(Type::kQ8_0, k));
  const __m256i rows = _mm256_mullo_epi32(
      _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0), _mm256_set1_epi32(64));
  for (int64_t c = 0; c < cols; ++c) {
    const char* q = act + c * act_row_bytes;
    const float* d = reinterpret_cast<const float*>(q + k);
    for (int64_t b = 0; b < nb; ++b) {
      char* tile = group + b * kQuantTileBytes;
      const __m256i v =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * b));
      _mm256_i32scatter_epi32(tile + c * 4, rows, v, 1);
      reinterpret_cast<float*>(tile + 512)[c] = d[b];
    }
  }
}

// Blocks [b0, b1) of weight rows [r0, r0 + nr) (nr <= 16) as signed bytes
// and F32 scales, kQuantTileBytes a block; rows past nr are zero.
template <typename Block>
void UnpackBand(const TileGemmArgs& a, int64_t r0, int64_t nr, int64_t b0,
                int64_t b1, char* band) {
  for (int64_t b = b0; b < b1; ++b) {
    char* tile = band + (b - b0) * kQuantTileBytes;
    float* scales = reinterpret_cast<float*>(tile + 512);
    for (int64_t i = 0; i < 16; ++i) {
      int8_t* out = reinterpret_cast<int8_t*>(tile + 32 * i);
      if (i >= nr) {
        std::memset(out, 0, 32);
        scales[i] = 0.0f;
        continue;
      }
      const Block& block = reinterpret_cast<const Block*>(
          a.w + (r0 + i) * a.w_row_bytes)[b];
      scales[i] = _cvtsh_ss(block.d);
      if constexpr (sizeof(Block) == sizeof(BlockQ8_0)) {
        std::memcpy(out, block.qs, 32);
      } else {
        const __m128i raw =
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(block.qs));
        const __m128i mask = _mm_set1_epi8(0x0F);
        const __m128i eight = _mm_set1_epi8(8);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                         _mm_sub_epi8(_mm_and_si128(raw, mask), eight));
        _mm_storeu_si128(
            reinterpret_cast<__m128i*>(out + 16),
            _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), mask), eight));
      }
    }
  }
}

// acc[r] += C[r] (as F32) * da * dw[r] for the 16 rows of a block's sums.
inline void ScaleInto(__m512 (&acc)[16], const int32_t* sums, const char* w,
                      const char* x) {
  const __m512 da = _mm512_loadu_ps(reinterpret_cast<const float*>(x + 512));
  const float* dw = reinterpret_cast<const float*>(w + 512);
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    const __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512(sums + 16 * r));
    acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(v, da), _mm512_set1_ps(dw[r]),
                             acc[r]);
  }
}

// The products of two consecutive blocks of a band (w) and a column group
// (x) into tiles 2p and 2p + 1.
template <int kPair>
inline void Products2(const char* w, const char* x) {
  constexpr int64_t kT = kQuantTileBytes;
  _tile_loadd(4, w, 32);
  _tile_loadd(6, x, 64);
  _tile_loadd(5, w + kT, 32);
  _tile_loadd(7, x + kT, 64);
  if constexpr (kPair == 0) {
    _tile_zero(0);
    _tile_dpbssd(0, 4, 6);
    _tile_zero(1);
    _tile_dpbssd(1, 5, 7);
  } else {
    _tile_zero(2);
    _tile_dpbssd(2, 4, 6);
    _tile_zero(3);
    _tile_dpbssd(3, 5, 7);
  }
}

template <int kPair>
inline void StorePair(int32_t* sums) {
  if constexpr (kPair == 0) {
    _tile_stored(0, sums, 64);
    _tile_stored(1, sums + 256, 64);
  } else {
    _tile_stored(2, sums, 64);
    _tile_stored(3, sums + 256, 64);
  }
}

template <typename Block>
void TileMulMatQuant(const TileGemmArgs& a) {
  ConfigureInt8();
  const int64_t nb = a.k / 32;
  const int64_t groups = GroupsOf(a.cols);
  const int64_t group_bytes = nb * kQuantTileBytes;
  const int64_t chunk =
      std::clamp<int64_t>(kChunkBytes / (groups * kQuantTileBytes), 1, nb);
  char* band = a.scratch;
  int32_t* sums = reinterpret_cast<int32_t*>(a.scratch + group_bytes);
  for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
    const int64_t b1 = std::min(nb, b0 + chunk);
    for (int64_t r0 = 0; r0 < a.rows; r0 += 16) {
      const int64_t nr = std::min<int64_t>(16, a.rows - r0);
      const __mmask16 rows = static_cast<__mmask16>((1u << nr) - 1);
      UnpackBand<Block>(a, r0, nr, b0, b1, band);
      for (int64_t g = 0; g < groups; ++g) {
        const char* x = a.packed + g * group_bytes;
        __m512 acc[16];
        for (__m512& v : acc) v = _mm512_setzero_ps();
        // Pairs of blocks in a pipeline of three stages: pair i's products
        // (into tiles 0-1 or 2-3, by i's parity), pair i - 1's sums stored,
        // pair i - 2's sums scaled. A tile's sums are read an iteration
        // after its store, so the loads find them in the cache rather than
        // wait for the store.
        const int64_t pairs = (b1 - b0) / 2;
        for (int64_t i = 0; i < pairs + 2; ++i) {
          if (i < pairs) {
            const char* w0 = band + 2 * i * kQuantTileBytes;
            const char* x0 = x + (b0 + 2 * i) * kQuantTileBytes;
            if (i % 2 == 0) {
              Products2<0>(w0, x0);
            } else {
              Products2<1>(w0, x0);
            }
          }
          if (i >= 1 && i <= pairs) {
            int32_t* store = sums + 512 * ((i - 1) % 2);
            if ((i - 1) % 2 == 0) {
              StorePair<0>(store);
            } else {
              StorePair<1>(store);
            }
          }
          if (i >= 2) {
            const int64_t p = i - 2;
            const int32_t* done = sums + 512 * (p % 2);
            const char* w0 = band + 2 * p * kQuantTileBytes;
            const char* x0 = x + (b0 + 2 * p) * kQuantTileBytes;
            ScaleInto(acc, done, w0, x0);
            ScaleInto(acc, done + 256, w0 + kQuantTileBytes,
                      x0 + kQuantTileBytes);
          }
        }
        int64_t b = b0 + 2 * pairs;
        for (; b < b1; ++b) {
          const char* w0 = band + (b - b0) * kQuantTileBytes;
          const char* x0 = x + b * kQuantTileBytes;
          _tile_loadd(4, w0, 32);
          _tile_loadd(6, x0, 64);
          _tile_zero(0);
          _tile_dpbssd(0, 4, 6);
          _tile_stored(0, sums, 64);
          ScaleInto(acc, sums, w0, x0);
        }
        // acc[r] holds row r of 16 columns; transposed, column c's 16
        // rows are contiguous in dst.
        __m512i by_column[16];
        for (int r = 0; r < 16; ++r) by_column[r] = _mm512_castps_si512(acc[r]);
        Transpose16(by_column);
        const int64_t c0 = g * kTileCols;
        for (int64_t c = 0; c < std::min<int64_t>(kTileCols, a.cols - c0); ++c) {
          float* out = a.dst + (c0 + c) * a.dst_col_stride + r0;
          __m512 v = _mm512_castsi512_ps(by_column[c]);
          if (b0 != 0) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rows, out));
          _mm512_mask_storeu_ps(out, rows, v);
        }
      }
    }
  }
  _tile_release();
}

}  // namespace

const CpuKernels& Kernels() {
  static const CpuKernels kernels = [] {
    CpuKernels k = cpu_avx512bf16::Kernels();
    k.level = SimdLevel::kAmx;
    k.tile_pack_q8 = PackQ8;
    k.tile_mul_mat_bf16 = TileMulMatFloat<Type::kBF16>;
    k.tile_mul_mat_f16 = TileMulMatFloat<Type::kF16>;
    k.tile_mul_mat_q8_0 = TileMulMatQuant<BlockQ8_0>;
    k.tile_mul_mat_q4_0 = TileMulMatQuant<BlockQ4_0>;
    return k;
  }();
  return kernels;
}

}  // namespace tessera::cpu_amx
