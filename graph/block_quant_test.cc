#include "graph/block_quant.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

uint32_t Word(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

TEST(BlockQuantTest, TraitsMatchGgml) {
  EXPECT_EQ(Traits(Type::kQ4_1).type_size, 20u);
  EXPECT_EQ(Traits(Type::kQ5_0).type_size, 22u);
  EXPECT_EQ(Traits(Type::kQ5_1).type_size, 24u);
  for (Type t : {Type::kQ4_1, Type::kQ5_0, Type::kQ5_1}) {
    EXPECT_EQ(Traits(t).block_size, 32);
    EXPECT_TRUE(Traits(t).is_quantized);
    EXPECT_EQ(TypeAlignment(t), 2u);
  }
  EXPECT_EQ(TypeName(Type::kQ4_1), "q4_1");
  EXPECT_EQ(TypeName(Type::kQ5_0), "q5_0");
  EXPECT_EQ(TypeName(Type::kQ5_1), "q5_1");
  EXPECT_EQ(RowSize(Type::kQ5_0, 96), 66u);
}

// x[j] = (j - 16) / 2: the largest magnitude is x[0] = -8, so d = -8 / -16
// = 0.5 and value j has level trunc(2 x + 16.5) = j: nibbles j and j + 16
// share byte j, and levels 16..31 set fifth bits 16..31.
TEST(BlockQuantTest, Q5_0HandWorkedBlock) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = (j - 16) * 0.5f;
  BlockQ5_0 b;
  QuantizeRowQ5_0(x, &b, 32);
  EXPECT_EQ(b.d, 0x3800);  // 0.5
  EXPECT_EQ(Word(b.qh), 0xFFFF0000u);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], 0x11 * j) << j;
  float y[32];
  DequantizeRowQ5_0(&b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

// With x[0] = -8 the largest magnitude, +8 would be level 32: clamped to
// 31, it comes back as 7.5.
TEST(BlockQuantTest, Q5_0ClampsTheOppositeExtreme) {
  float x[32] = {-8.0f, 8.0f};
  BlockQ5_0 b;
  QuantizeRowQ5_0(x, &b, 32);
  float y[32];
  DequantizeRowQ5_0(&b, y, 32);
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[1], 7.5f);
  for (int j = 2; j < 32; ++j) EXPECT_EQ(y[j], 0.0f) << j;
}

// x[j] = 2 + (j % 16) / 2: m = 2, d = 7.5 / 15 = 0.5, level j % 16.
TEST(BlockQuantTest, Q4_1HandWorkedBlock) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = 2.0f + (j % 16) * 0.5f;
  BlockQ4_1 b;
  QuantizeRowQ4_1(x, &b, 32);
  EXPECT_EQ(b.d, 0x3800);  // 0.5
  EXPECT_EQ(b.m, 0x4000);  // 2
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], 0x11 * j) << j;
  float y[32];
  DequantizeRowQ4_1(&b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

// x[j] = -3 + j / 4: m = -3, d = 7.75 / 31 = 0.25, level j.
TEST(BlockQuantTest, Q5_1HandWorkedBlock) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = -3.0f + j * 0.25f;
  BlockQ5_1 b;
  QuantizeRowQ5_1(x, &b, 32);
  EXPECT_EQ(b.d, 0x3400);  // 0.25
  EXPECT_EQ(b.m, 0xC200);  // -3
  EXPECT_EQ(Word(b.qh), 0xFFFF0000u);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], 0x11 * j) << j;
  float y[32];
  DequantizeRowQ5_1(&b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

// Levels read back from hand-set bytes: value 5 takes the low nibble of
// qs[5] and fifth bit 5, value 21 the high nibble of qs[5] and bit 21.
TEST(BlockQuantTest, UnpackReadsNibblesAndFifthBits) {
  uint8_t qs[16] = {};
  qs[5] = 0xA3;
  const uint32_t bits = (1u << 5) | (1u << 30);
  uint8_t qh[4];
  std::memcpy(qh, &bits, sizeof(bits));
  uint8_t q[32];
  UnpackBlockLevels(qs, qh, q);
  for (int j = 0; j < 32; ++j) {
    const int want = j == 5 ? 0x13 : j == 21 ? 0x0A : j == 30 ? 0x10 : 0;
    EXPECT_EQ(q[j], want) << j;
  }
  UnpackBlockLevels(qs, nullptr, q);
  EXPECT_EQ(q[5], 0x03);
  EXPECT_EQ(q[21], 0x0A);
  EXPECT_EQ(q[30], 0);
}

TEST(BlockQuantTest, ConstantAndZeroBlocksComeBackExactly) {
  const float zeros[32] = {};
  float y[32];
  BlockQ5_0 q5;
  QuantizeRowQ5_0(zeros, &q5, 32);
  DequantizeRowQ5_0(&q5, y, 32);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  float ones[32];
  for (float& v : ones) v = 1.5f;
  BlockQ4_1 q41;
  QuantizeRowQ4_1(ones, &q41, 32);
  DequantizeRowQ4_1(&q41, y, 32);
  for (float v : y) EXPECT_EQ(v, 1.5f);
  BlockQ5_1 q51;
  QuantizeRowQ5_1(ones, &q51, 32);
  DequantizeRowQ5_1(&q51, y, 32);
  for (float v : y) EXPECT_EQ(v, 1.5f);
}

// A block with non-finite values quantizes to some levels (clamped, so
// every conversion is defined) and leaves the next block as it would be
// alone.
TEST(BlockQuantTest, NonFiniteInputStaysInItsBlock) {
  float x[64] = {};
  x[3] = std::numeric_limits<float>::infinity();
  x[7] = std::numeric_limits<float>::quiet_NaN();
  x[9] = -1e30f;
  for (int j = 32; j < 64; ++j) x[j] = (j - 48) * 0.25f;
  for (Type t : {Type::kQ4_1, Type::kQ5_0, Type::kQ5_1}) {
    const size_t block = Traits(t).type_size;
    std::vector<uint8_t> both(2 * block), alone(block);
    RowFromFloat(t, x, both.data(), 64);
    RowFromFloat(t, x + 32, alone.data(), 32);
    EXPECT_EQ(std::memcmp(both.data() + block, alone.data(), block), 0)
        << TypeName(t);
    float y[64];
    RowToFloat(t, both.data(), y, 64);
    for (int j = 32; j < 64; ++j) EXPECT_TRUE(std::isfinite(y[j])) << j;
  }
}

std::vector<float> RandomValues(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.5f, 3.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// Each value comes back within half a step of its block, plus what storing
// d and m as fp16 costs.
template <typename Block>
void ExpectAffineRoundTrip(void (*quantize)(const float*, Block*, int64_t),
                           void (*dequantize)(const Block*, float*, int64_t),
                           int top, unsigned seed) {
  constexpr int kN = 32 * 64;
  const std::vector<float> x = RandomValues(kN, seed);
  std::vector<Block> q(kN / 32);
  std::vector<float> y(kN);
  quantize(x.data(), q.data(), kN);
  dequantize(q.data(), y.data(), kN);
  for (int b = 0; b < kN / 32; ++b) {
    float lo = x[b * 32], hi = x[b * 32];
    for (int j = 0; j < 32; ++j) {
      lo = std::min(lo, x[b * 32 + j]);
      hi = std::max(hi, x[b * 32 + j]);
    }
    const double d = (static_cast<double>(hi) - lo) / top;
    const double d16 = Fp16ToFp32(q[b].d);
    const double m16 = Fp16ToFp32(q[b].m);
    const double bound = d / 2 + top * std::fabs(d - d16) +
                         std::fabs(lo - m16) + 1e-6 * (std::fabs(lo) + hi);
    for (int j = 0; j < 32; ++j) {
      EXPECT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), bound)
          << "block " << b << " value " << j;
    }
  }
}

TEST(BlockQuantTest, Q4_1RoundTripErrorWithinHalfStep) {
  ExpectAffineRoundTrip<BlockQ4_1>(QuantizeRowQ4_1, DequantizeRowQ4_1, 15, 1);
}

TEST(BlockQuantTest, Q5_1RoundTripErrorWithinHalfStep) {
  ExpectAffineRoundTrip<BlockQ5_1>(QuantizeRowQ5_1, DequantizeRowQ5_1, 31, 2);
}

TEST(BlockQuantTest, Q5_0RoundTripErrorWithinHalfStep) {
  constexpr int kN = 32 * 64;
  const std::vector<float> x = RandomValues(kN, 3);
  std::vector<BlockQ5_0> q(kN / 32);
  std::vector<float> y(kN);
  QuantizeRowQ5_0(x.data(), q.data(), kN);
  DequantizeRowQ5_0(q.data(), y.data(), kN);
  for (int b = 0; b < kN / 32; ++b) {
    float max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[b * 32 + j]) > std::fabs(max)) max = x[b * 32 + j];
    }
    const double d = std::fabs(max / 16.0);
    const double d16 = std::fabs(Fp16ToFp32(q[b].d));
    // Half a step, plus the fp16 scale's cost at |level| <= 16; the value
    // opposite the largest may be clamped a whole step short.
    const double bound = d + 16 * std::fabs(d - d16) + 1e-6 * std::fabs(max);
    for (int j = 0; j < 32; ++j) {
      const double err = std::fabs(y[b * 32 + j] - x[b * 32 + j]);
      EXPECT_LE(err, bound) << "block " << b << " value " << j;
      if (std::fabs(x[b * 32 + j]) < 0.9 * std::fabs(max)) {
        EXPECT_LE(err, d / 2 + 16 * std::fabs(d - d16) + 1e-6)
            << "block " << b << " value " << j;
      }
    }
  }
}

// RowFromFloat and RowToFloat reach these quantizers for their types.
TEST(BlockQuantTest, RowConversionsUseTheBlockQuantizers) {
  const std::vector<float> x = RandomValues(64, 4);
  std::vector<uint8_t> buf(48), want_bytes(48);
  std::vector<float> y(64), want(64);
  QuantizeRowQ4_1(x.data(), reinterpret_cast<BlockQ4_1*>(want_bytes.data()),
                  64);
  RowFromFloat(Type::kQ4_1, x.data(), buf.data(), 64);
  EXPECT_EQ(std::memcmp(buf.data(), want_bytes.data(), 40), 0);
  DequantizeRowQ4_1(reinterpret_cast<BlockQ4_1*>(buf.data()), want.data(), 64);
  RowToFloat(Type::kQ4_1, buf.data(), y.data(), 64);
  EXPECT_EQ(y, want);

  QuantizeRowQ5_0(x.data(), reinterpret_cast<BlockQ5_0*>(want_bytes.data()),
                  64);
  RowFromFloat(Type::kQ5_0, x.data(), buf.data(), 64);
  EXPECT_EQ(std::memcmp(buf.data(), want_bytes.data(), 44), 0);
  DequantizeRowQ5_0(reinterpret_cast<BlockQ5_0*>(buf.data()), want.data(), 64);
  RowToFloat(Type::kQ5_0, buf.data(), y.data(), 64);
  EXPECT_EQ(y, want);

  QuantizeRowQ5_1(x.data(), reinterpret_cast<BlockQ5_1*>(want_bytes.data()),
                  64);
  RowFromFloat(Type::kQ5_1, x.data(), buf.data(), 64);
  EXPECT_EQ(std::memcmp(buf.data(), want_bytes.data(), 48), 0);
  DequantizeRowQ5_1(reinterpret_cast<BlockQ5_1*>(buf.data()), want.data(), 64);
  RowToFloat(Type::kQ5_1, buf.data(), y.data(), 64);
  EXPECT_EQ(y, want);
}

}  // namespace
}  // namespace tessera
