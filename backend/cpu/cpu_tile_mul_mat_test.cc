// The products of many columns of cpu_mul_mat.cc (F32, F16 and BF16 weights
// by FMAs at the avx2 and avx512 levels, FloatGemmArgs; the tile path,
// TileGemmArgs: BF16 pairs at the avx512bf16 level, the tile units at the
// amx level), where this CPU has them: what they round and what they keep
// exact, beyond the conformance suite's tolerances.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/alloc/tensor_allocator.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_level.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// dst = MUL_MAT(w (m x k of `type`, from F32 values), x (n x k F32)) on a
// device of `level`.
std::vector<float> Product(SimdLevel level, Type type,
                           const std::vector<float>& w, int64_t m,
                           const std::vector<float>& x, int64_t n, int64_t k) {
  Context ctx;
  Tensor* a = ctx.NewTensor(type, {k, m}).value();
  Tensor* b = ctx.NewTensor(Type::kF32, {k, n}).value();
  Tensor* out = MulMat(ctx, a, b).value();
  Graph graph;
  EXPECT_TRUE(graph.Expand(out).ok());
  CpuDevice device({.name = "cpu", .n_threads = 2, .max_simd = level});
  EXPECT_EQ(device.simd_level(), level);
  std::vector<Tensor*> all(graph.leafs().begin(), graph.leafs().end());
  all.insert(all.end(), graph.nodes().begin(), graph.nodes().end());
  std::unique_ptr<Buffer> buffer =
      AllocTensors(device.buffer_type(), all).value();
  std::vector<char> bytes(a->NumBytes());
  RowFromFloat(type, w.data(), bytes.data(), m * k);
  EXPECT_TRUE(a->buffer->SetTensor(*a, bytes.data(), 0, bytes.size()).ok());
  EXPECT_TRUE(
      b->buffer->SetTensor(*b, x.data(), 0, x.size() * sizeof(float)).ok());
  std::unique_ptr<Stream> stream = device.CreateStream().value();
  EXPECT_TRUE(stream->Compute(graph).ok());
  std::vector<float> got(m * n);
  EXPECT_TRUE(
      out->buffer->GetTensor(*out, got.data(), 0, got.size() * sizeof(float))
          .ok());
  return got;
}

// How far a product's dst (`got`, from Product) lies from the dot products,
// in double precision, of the weights w with the columns x as they are
// (exact) and with the columns rounded to BF16 (rounded), and how far
// those two lie apart (rounding): each the largest over dst.
struct Distances {
  double exact = 0;
  double rounded = 0;
  double rounding = 0;
};

Distances DistancesOf(const std::vector<float>& got,
                      const std::vector<float>& w, int64_t m,
                      const std::vector<float>& x, int64_t n, int64_t k) {
  Distances d;
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t r = 0; r < m; ++r) {
      double exact = 0, rounded = 0;
      for (int64_t i = 0; i < k; ++i) {
        const float xi = x[c * k + i];
        exact += double{w[r * k + i]} * xi;
        rounded += double{w[r * k + i]} * Bf16ToFp32(Fp32ToBf16(xi));
      }
      d.exact = std::max(d.exact, std::abs(got[c * m + r] - exact));
      d.rounded = std::max(d.rounded, std::abs(got[c * m + r] - rounded));
      d.rounding = std::max(d.rounding, std::abs(rounded - exact));
    }
  }
  return d;
}

class TileMulMatTest : public testing::Test {
 protected:
  void SetUp() override {
    if (DetectSimdLevel() < SimdLevel::kAmx) {
      GTEST_SKIP() << "this CPU (or its kernel) has no AMX tile units";
    }
  }
};

// F16 weights that need all 11 significant bits (1 + j / 1024, which BF16
// would round to 1) against columns exact in BF16 (small integers): every
// product and partial sum is exact in F32, so the tile product equals the
// exact dot product, bit for bit. 37 rows and 20 columns leave partial
// tiles of both.
TEST_F(TileMulMatTest, F16WeightsAreMultipliedExactly) {
  constexpr int64_t m = 37, n = 20, k = 96;
  std::vector<float> w(m * k), x(n * k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      w[r * k + i] = 1.0f + static_cast<float>((r * 5 + i) % 11) / 1024.0f;
    }
  }
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t i = 0; i < k; ++i) {
      x[c * k + i] = static_cast<float>((c + 3 * i) % 7) - 3.0f;
    }
  }
  const std::vector<float> got =
      Product(SimdLevel::kAmx, Type::kF16, w, m, x, n, k);
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t r = 0; r < m; ++r) {
      double want = 0;
      for (int64_t i = 0; i < k; ++i) want += double{w[r * k + i]} * x[c * k + i];
      EXPECT_EQ(got[c * m + r], static_cast<float>(want))
          << "row " << r << " column " << c;
    }
  }
}

// F32, F16 and BF16 weights against many columns by FMAs (at the avx2 and
// avx512 levels, F32 and F16 at the avx512bf16 level) meet the columns
// unrounded: the result is the exact dot product to F32 summation error,
// where columns rounded to BF16 would be visibly off. 37 rows and 20
// columns leave partial bands and tiles; k = 80 is a multiple of 16 but not
// of 32.
TEST(FloatGemmTest, WeightsMeetColumnsUnrounded) {
  if (DetectSimdLevel() < SimdLevel::kAvx2) {
    GTEST_SKIP() << "this CPU has no AVX2";
  }
  constexpr int64_t m = 37, n = 20, k = 80;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> w(m * k), x(n * k);
  for (float& v : w) v = uniform(rng);
  for (float& v : x) v = uniform(rng);
  for (SimdLevel level :
       {SimdLevel::kAvx2, SimdLevel::kAvx512, SimdLevel::kAvx512Bf16}) {
    if (level > DetectSimdLevel()) continue;
    for (Type type : {Type::kF32, Type::kF16, Type::kBF16}) {
      // BF16 weights take the pair products from the avx512bf16 level on.
      if (type == Type::kBF16 && level > SimdLevel::kAvx512) continue;
      std::vector<float> wt(w);
      for (float& v : wt) {
        if (type == Type::kF16) v = Fp16ToFp32(Fp32ToFp16(v));
        if (type == Type::kBF16) v = Bf16ToFp32(Fp32ToBf16(v));
      }
      const Distances d =
          DistancesOf(Product(level, type, wt, m, x, n, k), wt, m, x, n, k);
      EXPECT_LT(d.exact, 2e-5) << SimdLevelName(level) << " " << TypeName(type);
      // Rounded columns would show.
      EXPECT_GT(d.rounding, 1e-3)
          << SimdLevelName(level) << " " << TypeName(type);
    }
  }
}

// BF16 products (and F16 ones on the tile units) round the columns to
// BF16, to nearest even, and nothing else, at each level that has them:
// the result is the dot product of the weights with the rounded columns,
// to F32 summation error. 33 rows and 17 columns leave partial bands and
// tiles.
TEST(Bf16ProductTest, ColumnsAreRoundedToBf16) {
  if (DetectSimdLevel() < SimdLevel::kAvx512Bf16) {
    GTEST_SKIP() << "this CPU has no AVX512-BF16";
  }
  constexpr int64_t m = 33, n = 17, k = 128;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> w(m * k), x(n * k);
  for (float& v : w) v = Bf16ToFp32(Fp32ToBf16(uniform(rng)));
  for (float& v : x) v = uniform(rng);
  for (SimdLevel level : SupportedSimdLevels()) {
    if (level < SimdLevel::kAvx512Bf16) continue;
    for (Type type : {Type::kBF16, Type::kF16}) {
      // Below the tile units F16 weights meet F32 columns.
      if (type == Type::kF16 && level < SimdLevel::kAmx) continue;
      std::vector<float> wt(w);
      if (type == Type::kF16) {
        for (float& v : wt) v = Fp16ToFp32(Fp32ToFp16(v));
      }
      const Distances d =
          DistancesOf(Product(level, type, wt, m, x, n, k), wt, m, x, n, k);
      EXPECT_LT(d.rounded, 1e-5)
          << SimdLevelName(level) << " " << TypeName(type);
      // The rounding is visible: unrounded columns would differ.
      EXPECT_GT(d.exact, 1e-3) << SimdLevelName(level) << " " << TypeName(type);
    }
  }
}

// Q8_0 and Q4_0 tile products equal the AVX-512 level's integer products of
// the same quantized columns, up to F32 summation order.
TEST_F(TileMulMatTest, QuantizedProductsEqualTheAvx512Level) {
  constexpr int64_t m = 45, n = 35, k = 2048;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(m * k), x(n * k);
  for (float& v : w) v = normal(rng);
  for (float& v : x) v = normal(rng);
  for (Type type : {Type::kQ8_0, Type::kQ4_0}) {
    const std::vector<float> tiles =
        Product(SimdLevel::kAmx, type, w, m, x, n, k);
    const std::vector<float> vnni =
        Product(SimdLevel::kAvx512, type, w, m, x, n, k);
    for (size_t i = 0; i < tiles.size(); ++i) {
      EXPECT_NEAR(tiles[i], vnni[i], 2e-5 * std::sqrt(double{k}))
          << TypeName(type) << " at " << i;
    }
  }
}

}  // namespace
}  // namespace tessera
