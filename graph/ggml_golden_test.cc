// Blocks written by ggml d99724f's reference quantizers
// (quantize_row_*_ref) and values read back by its dequantizers, for
// x[i] = ((37 i) mod 101 - 50) / 16 (exact in float): tessera reads ggml's
// bytes as ggml does, and its Q4_1, Q5_0 and Q5_1 quantizers write ggml's
// bytes. (Its K-quant quantizers fit differently from ggml's, so their bytes
// are not compared.) The sums and samples are ggml's, printed with nine
// significant digits.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

struct Golden {
  Type type;
  int64_t n;
  std::vector<uint8_t> bytes;
  double sum;
  double weighted_squares;  // sum of (i + 1) y[i]^2
  std::vector<std::pair<int, float>> samples;
  bool same_quantizer;
};

const std::vector<Golden>& Goldens() {
  static const std::vector<Golden>* goldens = new std::vector<Golden>{
      {Type::kQ4_1,
       32,
       {
           0xab, 0x36, 0x40, 0xc2, 0xd0, 0x36, 0x9b, 0xf2, 0x57, 0xbd,
           0x13, 0x69, 0xce, 0x25, 0x8a, 0xe0, 0x46, 0x9c, 0xf2, 0x58,
       },
       0.01953125,
       1882.79177,
       {{0, -3.125f},
        {4, -0.207763672f},
        {8, 2.70947266f},
        {12, -0.624511719f},
        {16, 2.29272461f},
        {20, -1.04125977f},
        {24, 1.87597656f},
        {28, -1.45800781f}},
       true},
      {Type::kQ5_0,
       32,
       {
           0x40, 0x32, 0xa4, 0xa5, 0x2d, 0x6d, 0xc0, 0x7c, 0x38, 0xf3, 0xbf,
           0x6b, 0x26, 0xe2, 0xae, 0x5a, 0x15, 0xd1, 0x8d, 0x49, 0xf4, 0xc0,
       },
       -0.9765625,
       1749.22943,
       {{0, -3.125f},
        {4, -0.1953125f},
        {8, 2.734375f},
        {12, -0.5859375f},
        {16, 2.34375f},
        {20, -0.9765625f},
        {24, 1.953125f},
        {28, -1.5625f}},
       true},
      {Type::kQ5_1,
       32,
       {
           0x74, 0x32, 0x40, 0xc2, 0xa4, 0xa5, 0x2d, 0x6d,
           0xb0, 0x7b, 0x37, 0xe3, 0xaf, 0x6a, 0x26, 0xd2,
           0x9d, 0x59, 0x05, 0xc1, 0x8c, 0x48, 0xf4, 0xb0,
       },
       -0.783203125,
       1798.74586,
       {{0, -3.125f},
        {4, -0.100097656f},
        {8, 2.72314453f},
        {12, -0.705078125f},
        {16, 2.31982422f},
        {20, -1.10839844f},
        {24, 1.91650391f},
        {28, -1.51171875f}},
       true},
      {Type::kQ2_K,
       256,
       {
           0xde, 0xde, 0xcd, 0xdf, 0xfe, 0xde, 0xff, 0xce, 0xde, 0xbc, 0xde,
           0xee, 0xdc, 0xef, 0xbe, 0xef, 0x68, 0xb1, 0xd6, 0x6c, 0xb1, 0x1b,
           0x6c, 0x86, 0x1b, 0xb1, 0xc6, 0x6c, 0xb1, 0xd6, 0x6c, 0xb2, 0x1b,
           0x6d, 0x86, 0x1b, 0x71, 0xc6, 0x28, 0xb1, 0xd7, 0x6c, 0xb6, 0x1b,
           0x6d, 0x86, 0x1b, 0xb1, 0x1b, 0x7d, 0x86, 0x2b, 0x71, 0xc6, 0x2c,
           0xb1, 0xdb, 0x6c, 0x86, 0x1b, 0x71, 0x86, 0x28, 0xb1, 0xdb, 0x6c,
           0xb5, 0x1b, 0x6c, 0x86, 0x1b, 0xa1, 0xc6, 0x6c, 0xb1, 0xdb, 0x6c,
           0xb6, 0x1b, 0x6c, 0x01, 0x30, 0x9d, 0x32,
       },
       -8.92236328,
       108903.527,
       {{0, -2.68664551f},
        {32, 0.773193359f},
        {64, 0.403442383f},
        {96, -1.22314453f},
        {128, 2.56848145f},
        {160, 0.816772461f},
        {192, -1.18518066f},
        {224, -2.27331543f}},
       false},
      {Type::kQ3_K,
       256,
       {
           0x86, 0xdc, 0x2b, 0xc6, 0xfd, 0x23, 0xd6, 0x79, 0x23, 0xdc, 0x39,
           0x86, 0xfc, 0x2b, 0xd6, 0xfd, 0xa4, 0x51, 0xfe, 0x04, 0x5b, 0xae,
           0x05, 0xfb, 0xae, 0x51, 0xfb, 0xa4, 0x59, 0xfe, 0x04, 0x5b, 0x48,
           0x27, 0xe2, 0x8d, 0x78, 0x23, 0xde, 0x89, 0x77, 0x22, 0xdd, 0x88,
           0x77, 0xe2, 0x9d, 0x78, 0x5d, 0xf2, 0xb7, 0x9c, 0x2d, 0xb6, 0x8b,
           0x5d, 0xe2, 0xf7, 0x48, 0x5d, 0x22, 0xb7, 0x88, 0x2d, 0xfd, 0x62,
           0x97, 0xc8, 0x2d, 0x52, 0x8b, 0xf8, 0x22, 0x56, 0x88, 0xfd, 0x2e,
           0x57, 0x8b, 0x3d, 0xe2, 0xc7, 0x78, 0x7d, 0xd2, 0x9b, 0xbc, 0x2d,
           0x96, 0x8b, 0x7d, 0xe2, 0xd7, 0x78, 0x7d, 0xd2, 0xb6, 0x9a, 0xb6,
           0x9a, 0x65, 0x3a, 0xa6, 0x00, 0x30, 0x3f, 0xf0, 0x33, 0xde, 0xa7,
       },
       0.79901123,
       106963.993,
       {{0, -3.19604492f},
        {32, 1.59802246f},
        {64, 0.0f},
        {96, -2.39703369f},
        {128, 2.48922729f},
        {160, 0.829742432f},
        {192, -0.79901123f},
        {224, -2.39703369f}},
       false},
  };
  return *goldens;
}

std::vector<float> Input(int64_t n) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>((i * 37) % 101 - 50) / 16.0f;
  }
  return x;
}

TEST(GgmlGoldenTest, DequantizesGgmlBlocksAsGgml) {
  for (const Golden& g : Goldens()) {
    SCOPED_TRACE(TypeName(g.type));
    ASSERT_EQ(g.bytes.size(), RowSize(g.type, g.n));
    std::vector<float> y(g.n);
    RowToFloat(g.type, g.bytes.data(), y.data(), g.n);
    double sum = 0, weighted = 0;
    for (int64_t i = 0; i < g.n; ++i) {
      sum += y[i];
      weighted += static_cast<double>(y[i]) * y[i] * (i + 1);
    }
    EXPECT_NEAR(sum, g.sum, 1e-8 * (1 + std::fabs(g.sum)));
    EXPECT_NEAR(weighted, g.weighted_squares, 1e-8 * g.weighted_squares);
    for (const auto& [i, v] : g.samples) EXPECT_EQ(y[i], v) << "value " << i;
  }
}

TEST(GgmlGoldenTest, QuantizesAsGgmlWhereTheAlgorithmIsGgmls) {
  for (const Golden& g : Goldens()) {
    if (!g.same_quantizer) continue;
    SCOPED_TRACE(TypeName(g.type));
    const std::vector<float> x = Input(g.n);
    std::vector<uint8_t> bytes(g.bytes.size());
    RowFromFloat(g.type, x.data(), bytes.data(), g.n);
    EXPECT_EQ(bytes, g.bytes);
  }
}

}  // namespace
}  // namespace tessera
