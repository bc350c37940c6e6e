#include "backend/cpu/kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/simd_level.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// Activation rows quantize to the same bytes at every level as at the
// scalar one: random blocks and the blocks where rounding or the scale has
// to choose (halves that round to even, all zero, NaN, infinities, the
// largest and smallest floats).
TEST(KernelsTest, QuantizeActIsTheSameAtEveryLevel) {
  constexpr int64_t kBlocks = 64;
  constexpr int64_t k = 32 * kBlocks;
  std::vector<float> x(k);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : x) v = normal(rng);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            inf,
                            -inf,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(),
                            1e-30f};
  // Block 1: levels k + 0.5 (amax 127 gives inv 1).
  for (int i = 0; i < 32; ++i) x[32 + i] = i == 0 ? 127.0f : i - 15.5f;
  // Block 2: all zero. Blocks 3..: one special among random values.
  for (int i = 0; i < 32; ++i) x[64 + i] = 0.0f;
  for (size_t j = 0; j < std::size(specials); ++j) {
    x[32 * (3 + j) + 5] = specials[j];
  }
  // A block of only tiny values, and one of a lone largest float.
  for (int i = 0; i < 32; ++i) x[32 * 20 + i] = 1e-38f * (i - 16);
  for (int i = 0; i < 32; ++i) x[32 * 21 + i] = i == 3 ? -3.4e38f : 1.0f;
  const CpuKernels& scalar = KernelsFor(SimdLevel::kScalar);
  std::vector<char> want(ActRowBytes(k)), got(ActRowBytes(k));
  scalar.quantize_act(x.data(), want.data(), k);
  for (SimdLevel level : SupportedSimdLevels()) {
    std::memset(got.data(), 0x5A, got.size());
    KernelsFor(level).quantize_act(x.data(), got.data(), k);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), k + 8 * kBlocks), 0)
        << SimdLevelName(level);
  }
}

// K-quant activation rows (256-value blocks with 16-value sums) likewise:
// a block whose largest magnitude is 127 (levels x.5 round to even), all
// zero, one NaN, one infinity, only tiny values, a lone largest float, and
// random ones.
TEST(KernelsTest, QuantizeActKIsTheSameAtEveryLevel) {
  constexpr int64_t kBlocks = 8;
  constexpr int64_t k = 256 * kBlocks;
  std::vector<float> x(k);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : x) v = normal(rng);
  for (int i = 0; i < 256; ++i) x[i] = i == 0 ? 127.0f : (i % 64) - 31.5f;
  for (int i = 0; i < 256; ++i) x[256 + i] = 0.0f;
  x[512 + 17] = std::numeric_limits<float>::quiet_NaN();
  x[768 + 200] = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < 256; ++i) x[1024 + i] = 1e-38f * (i % 32 - 16);
  for (int i = 0; i < 256; ++i) x[1280 + i] = i == 99 ? -3.4e38f : 1.0f;
  const CpuKernels& scalar = KernelsFor(SimdLevel::kScalar);
  std::vector<char> want(KActRowBytes(k)), got(KActRowBytes(k));
  scalar.quantize_act_k(x.data(), want.data(), k);
  for (SimdLevel level : SupportedSimdLevels()) {
    std::memset(got.data(), 0x5A, got.size());
    KernelsFor(level).quantize_act_k(x.data(), got.data(), k);
    // q, d and s (the row's padding is not written).
    EXPECT_EQ(std::memcmp(want.data(), got.data(),
                          k + 4 * kBlocks + 2 * (k / 16)),
              0)
        << SimdLevelName(level);
  }
}

}  // namespace
}  // namespace tessera
