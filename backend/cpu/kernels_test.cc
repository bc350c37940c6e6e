#include "backend/cpu/kernels.h"

#include <algorithm>
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

using QuantizeActFn = void (*)(const float* x, char* row, int64_t k);

// Expects the first `bytes` bytes (q, d and s; a row's padding is not
// written) of x's activation row, made by the activation quantizer
// `quantize` of every supported level, to equal the scalar level's.
void ExpectSameAtEveryLevel(QuantizeActFn CpuKernels::*quantize,
                            const std::vector<float>& x, size_t row_bytes,
                            size_t bytes) {
  const int64_t k = static_cast<int64_t>(x.size());
  std::vector<char> want(row_bytes), got(row_bytes);
  (KernelsFor(SimdLevel::kScalar).*quantize)(x.data(), want.data(), k);
  for (SimdLevel level : SupportedSimdLevels()) {
    std::memset(got.data(), 0x5A, got.size());
    (KernelsFor(level).*quantize)(x.data(), got.data(), k);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), bytes), 0)
        << SimdLevelName(level);
  }
}

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
  ExpectSameAtEveryLevel(&CpuKernels::quantize_act, x, ActRowBytes(k),
                         k + 8 * kBlocks);
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
  ExpectSameAtEveryLevel(&CpuKernels::quantize_act_k, x, KActRowBytes(k),
                         k + 4 * kBlocks + 2 * (k / 16));
}

// soft_max at every level: keys masked with -inf and keys more than 87
// below the largest get exactly 0 (in the vector steps and after them), the
// rest agree with a softmax in double; a NaN makes the row NaN.
TEST(KernelsTest, SoftMaxExcludesMaskedAndFarKeysAtEveryLevel) {
  constexpr int64_t n = 50;  // three steps of 16 and two after them
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(n), mask(n, 0.0f);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (float& v : x) v = normal(rng);
  for (int64_t i : {2, 17, 31, 48}) mask[i] = -inf;
  for (int64_t i : {5, 20, 49}) x[i] = -400.0f;  // e^-200 after the scale
  const float scale = 0.5f;
  std::vector<double> want(n);
  double max = -inf;
  for (int64_t i = 0; i < n; ++i) {
    want[i] = static_cast<double>(x[i]) * scale + mask[i];
    max = std::max(max, want[i]);
  }
  double sum = 0.0;
  for (double& w : want) sum += w = std::exp(w - max);
  for (double& w : want) w /= sum;
  for (SimdLevel level : SupportedSimdLevels()) {
    std::vector<float> got(n);
    KernelsFor(level).soft_max(x.data(), mask.data(), got.data(), n, scale,
                               1.0f);
    for (int64_t i = 0; i < n; ++i) {
      if (mask[i] == -inf || x[i] == -400.0f) {
        EXPECT_EQ(got[i], 0.0f) << SimdLevelName(level) << " " << i;
      } else {
        EXPECT_NEAR(got[i], want[i], 1e-6 * want[i] + 1e-12)
            << SimdLevelName(level) << " " << i;
      }
    }
    std::vector<float> with_nan = x;
    with_nan[40] = std::numeric_limits<float>::quiet_NaN();
    KernelsFor(level).soft_max(with_nan.data(), nullptr, got.data(), n, scale,
                               1.0f);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_TRUE(std::isnan(got[i])) << SimdLevelName(level) << " " << i;
    }
  }
}

// act at every level, SiLU and GELU (tanh form), gated and not: within a
// few roundings of the same function in double, plus the float range
// reduction's error, relative |z| 2^-23 for e^z, over both signs'
// saturating ranges and into the vector steps' tail; x sigmoid keeps
// infinities (+inf gives +inf, -inf NaN as 0 * inf) and NaN.
TEST(KernelsTest, ActAgreesWithDoubleAtEveryLevel) {
  constexpr int64_t n = 83;  // five steps of 16 and three after them
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = -100.0f + 200.0f * static_cast<float>(i) / (n - 1);
    if (i % 3 == 0) x[i] /= 40.0f;  // near 0 too
    g[i] = 0.5f + static_cast<float>(i % 7);
  }
  // The exponential's argument, and the function.
  auto gelu_arg = [](double v) {
    return 2.0 * 0.79788456080286535588 * v * (1.0 + 0.044715 * v * v);
  };
  auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
  auto gelu = [&](double v) { return v / (1.0 + std::exp(-gelu_arg(v))); };
  for (SimdLevel level : SupportedSimdLevels()) {
    for (ActKind kind : {ActKind::kSilu, ActKind::kGelu}) {
      for (bool gated : {false, true}) {
        std::vector<float> got(n);
        KernelsFor(level).act(kind, x.data(), gated ? g.data() : nullptr,
                              got.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const bool is_silu = kind == ActKind::kSilu;
          double want = is_silu ? silu(x[i]) : gelu(x[i]);
          if (gated) want *= g[i];
          const double z = is_silu ? x[i] : gelu_arg(x[i]);
          const double rel = 4e-7 + std::fabs(z) * 2.4e-7;
          EXPECT_NEAR(got[i], want, rel * std::fabs(want) + 1e-30)
              << SimdLevelName(level) << " kind " << static_cast<int>(kind)
              << " gated " << gated << " x " << x[i];
        }
      }
    }
    std::vector<float> special(n, 1.0f), got(n);
    special[3] = inf;
    special[20] = -inf;
    special[37] = std::numeric_limits<float>::quiet_NaN();
    special[81] = inf;
    KernelsFor(level).act(ActKind::kSilu, special.data(), nullptr, got.data(),
                          n);
    EXPECT_EQ(got[3], inf) << SimdLevelName(level);
    EXPECT_EQ(got[81], inf) << SimdLevelName(level);
    EXPECT_TRUE(std::isnan(got[20])) << SimdLevelName(level);
    EXPECT_TRUE(std::isnan(got[37])) << SimdLevelName(level);
    EXPECT_NEAR(got[0], silu(1.0), 4e-7) << SimdLevelName(level);
  }
}

}  // namespace
}  // namespace tessera
