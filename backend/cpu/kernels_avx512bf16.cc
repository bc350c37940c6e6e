// The avx512bf16 level (SimdLevel::kAvx512Bf16): the AVX-512 table, plus
// products of BF16 weights with many columns (TileGemmArgs, kernels.h) by
// vdpbf16ps, which sums the products of two BF16 pairs into each F32 lane
// at twice the rate of FMAs. Compiled with the AVX-512 flags and
// -mavx512bf16.
//
// The columns are packed rounded to BF16, 32 values of 16 columns after
// another (tile_pack_bf16, which the amx level keeps); the weights stay
// exact. Weight rows go in bands of 32, regrouped (kernels_bands_x86.inc)
// once per band and chunk of k: per 32-value step, word j of each row (its
// values 2j and 2j + 1) for rows 0-15, then rows 16-31, 64 bytes a word.
// A product broadcasts word j of a column and meets those 64 bytes, so
// each lane sums one weight row's products with that column: an
// accumulator holds 16 rows of one destination column, and no sum is
// horizontal. Products go over k in chunks whose packed columns stay in
// the core's second-level cache (kChunkBytes). bench/ops MUL_MAT bf16
// n=512 (m=4096, k=14336) on a 2-core Zen 4 VM took 331 ms at the avx512
// level (columns and weights converted to F32 for OpenBLAS sgemm) and 162
// ms so, 0.79 of the vdpbf16ps peak.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_levels.h"
#include "graph/type.h"

namespace tessera::cpu_avx512bf16 {
namespace {

#include "backend/cpu/kernels_bands_x86.inc"

// Packed columns a chunk of k may take: half of a Zen 4 core's 1 MiB
// second-level cache, leaving room for the weight band.
constexpr int64_t kChunkBytes = 1 << 19;

// Columns of one tile: with the two halves of a band, 16 accumulators.
constexpr int kTileColumns = 8;
static_assert(kTileCols % kTileColumns == 0, "a tile within one group");

void PackBf16(const float* x, int64_t x_col_stride, int64_t cols, int64_t k,
              char* group) {
  if (cols < kTileCols) {
    std::memset(group, 0, TileGroupBytes(Type::kBF16, k));
  }
  for (int64_t c = 0; c < cols; ++c) {
    const float* col = x + c * x_col_stride;
    for (int64_t s = 0; s < k / 32; ++s) {
      // 32 values in order, rounded to nearest even.
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(col + 32 * s + 16),
                                             _mm512_loadu_ps(col + 32 * s));
      _mm512_storeu_si512(group + s * 1024 + c * 64,
                          reinterpret_cast<__m512i>(v));
    }
  }
}

// Rows [r0, r0 + nr) (nr <= 32) of columns [c0, c0 + nc) (nc <=
// kTileColumns, in one group) over steps [s0, s1), whose band is `band`:
// stored to dst at the first chunk (s0 == 0), added to it after.
void Tile(const TileGemmArgs& a, const char* band, int64_t s0, int64_t s1,
          int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  const int64_t group_bytes =
      static_cast<int64_t>(TileGroupBytes(Type::kBF16, a.k));
  const char* x =
      a.packed + (c0 / kTileCols) * group_bytes + (c0 % kTileCols) * 64;
  __m512 acc[2][kTileColumns];
  for (auto& half : acc) {
    for (__m512& v : half) v = _mm512_setzero_ps();
  }
  for (int64_t s = s0; s < s1; ++s) {
    const char* w = band + (s - s0) * 2048;
    const char* xs = x + s * 1024;
    for (int j = 0; j < 16; ++j) {
      const __m512bh w0 =
          reinterpret_cast<__m512bh>(_mm512_load_si512(w + 64 * j));
      const __m512bh w1 =
          reinterpret_cast<__m512bh>(_mm512_load_si512(w + 1024 + 64 * j));
      for (int c = 0; c < kTileColumns; ++c) {
        int32_t word;
        std::memcpy(&word, xs + c * 64 + 4 * j, sizeof(word));
        const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(word));
        acc[0][c] = _mm512_dpbf16_ps(acc[0][c], w0, xv);
        acc[1][c] = _mm512_dpbf16_ps(acc[1][c], w1, xv);
      }
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int64_t valid = std::clamp<int64_t>(nr - 16 * h, 0, 16);
    if (valid == 0) break;
    const __mmask16 rows = static_cast<__mmask16>((1u << valid) - 1);
    for (int64_t c = 0; c < nc; ++c) {
      float* d = a.dst + (c0 + c) * a.dst_col_stride + r0 + 16 * h;
      const __m512 sum =
          s0 == 0 ? acc[h][c]
                  : _mm512_add_ps(_mm512_maskz_loadu_ps(rows, d), acc[h][c]);
      _mm512_mask_storeu_ps(d, rows, sum);
    }
  }
}

void TileMulMatBf16(const TileGemmArgs& a) {
  const int64_t steps = a.k / 32;
  const int64_t chunk =
      std::clamp<int64_t>(kChunkBytes / (GroupsOf(a.cols) * 1024), 1, steps);
  for (int64_t s0 = 0; s0 < steps; s0 += chunk) {
    const int64_t s1 = std::min(steps, s0 + chunk);
    for (int64_t r0 = 0; r0 < a.rows; r0 += 32) {
      const int64_t nr = std::min<int64_t>(32, a.rows - r0);
      Regroup<Type::kBF16>(a, r0, nr, s0, s1, a.scratch);
      for (int64_t c0 = 0; c0 < a.cols; c0 += kTileColumns) {
        Tile(a, a.scratch, s0, s1, r0, nr, c0,
             std::min<int64_t>(kTileColumns, a.cols - c0));
      }
    }
  }
}

}  // namespace

const CpuKernels& Kernels() {
  static const CpuKernels kernels = [] {
    CpuKernels k = cpu_avx512::kKernels;
    k.level = SimdLevel::kAvx512Bf16;
    k.tile_pack_bf16 = PackBf16;
    k.tile_mul_mat_bf16 = TileMulMatBf16;
    return k;
  }();
  return kernels;
}

}  // namespace tessera::cpu_avx512bf16
