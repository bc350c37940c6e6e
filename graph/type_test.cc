#include "graph/type.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint32_t ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

TEST(TypeTest, TraitsMatchGgml) {
  EXPECT_EQ(Traits(Type::kF32).type_size, 4u);
  EXPECT_EQ(Traits(Type::kF16).type_size, 2u);
  EXPECT_EQ(Traits(Type::kBF16).type_size, 2u);
  EXPECT_EQ(Traits(Type::kI32).type_size, 4u);
  EXPECT_EQ(Traits(Type::kQ8_0).type_size, 34u);
  EXPECT_EQ(Traits(Type::kQ8_0).block_size, 32);
  EXPECT_TRUE(Traits(Type::kQ8_0).is_quantized);
  EXPECT_EQ(Traits(Type::kQ4_0).type_size, 18u);
  EXPECT_EQ(Traits(Type::kQ4_0).block_size, 32);
  EXPECT_FALSE(Traits(Type::kBF16).is_quantized);
  EXPECT_EQ(TypeName(Type::kQ4_0), "q4_0");
  EXPECT_EQ(TypeName(Type::kBF16), "bf16");
}

TEST(TypeTest, IsValidTypeChecksRange) {
  for (int i = 0; i < kTypeCount; ++i) EXPECT_TRUE(IsValidType(i));
  EXPECT_FALSE(IsValidType(-1));
  EXPECT_FALSE(IsValidType(kTypeCount));
  EXPECT_FALSE(IsValidType(1 << 30));
}

TEST(TypeTest, TypeNamedFindsEveryTypeByItsName) {
  for (int32_t i = 0; i < kTypeCount; ++i) {
    const Type type = static_cast<Type>(i);
    EXPECT_EQ(TypeNamed(TypeName(type)), type) << TypeName(type);
  }
  EXPECT_EQ(TypeNamed("q8_0"), Type::kQ8_0);
  EXPECT_EQ(TypeNamed("q4_K"), Type::kQ4_K);
  EXPECT_EQ(TypeNamed("Q8_0"), std::nullopt);
  EXPECT_EQ(TypeNamed(""), std::nullopt);
  EXPECT_EQ(TypeNamed("f16 "), std::nullopt);
}

TEST(TypeTest, RowSizeCountsBlocks) {
  EXPECT_EQ(RowSize(Type::kF32, 10), 40u);
  EXPECT_EQ(RowSize(Type::kF16, 10), 20u);
  EXPECT_EQ(RowSize(Type::kQ8_0, 64), 68u);
  EXPECT_EQ(RowSize(Type::kQ4_0, 96), 54u);
  EXPECT_EQ(RowSize(Type::kI32, 0), 0u);
}

TEST(TypeTest, Fp16KnownValues) {
  EXPECT_EQ(Fp32ToFp16(0.0f), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-0.0f), 0x8000);
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3c00);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xc000);
  EXPECT_EQ(Fp32ToFp16(0.5f), 0x3800);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7bff);               // largest finite
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(Fp16ToFp32(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFp32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFp32(0xfbff), -65504.0f);
}

TEST(TypeTest, Fp16RoundsToNearestEven) {
  // Halfway between 1 and 1 + 2^-10: ties to the even mantissa (1).
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // Halfway between 1 + 2^-10 (odd) and 1 + 2^-9: ties up to even.
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Just above halfway rounds up.
  EXPECT_EQ(Fp32ToFp16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)),
            0x3c01);
  // 65520 is halfway between 65504 and 65536 (infinity): ties to even = inf.
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);
  EXPECT_EQ(Fp32ToFp16(65519.0f), 0x7bff);
  // Subnormals: 2^-25 is halfway between 0 and 2^-24 -> 0; 1.5 * 2^-24 is
  // halfway between 1 and 2 units -> 2.
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -24)), 0x0002);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-std::ldexp(1.0f, -30)), 0x8000);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1023.75f, -24)), 0x0400);
}

TEST(TypeTest, Fp16PreservesSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Fp32ToFp16(inf), 0x7c00);
  EXPECT_EQ(Fp32ToFp16(-inf), 0xfc00);
  EXPECT_EQ(Fp32ToFp16(1e10f), 0x7c00);
  EXPECT_EQ(Fp32ToFp16(-1e10f), 0xfc00);
  EXPECT_TRUE(std::isinf(Fp16ToFp32(0x7c00)));
  EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(-std::nanf("")))));
  // A NaN whose payload is only in the low bits stays a NaN.
  EXPECT_TRUE(std::isnan(Fp16ToFp32(Fp32ToFp16(FromBits(0x7f800001u)))));
  EXPECT_TRUE(std::signbit(Fp16ToFp32(Fp32ToFp16(-std::nanf("")))));
}

TEST(TypeTest, Fp16RoundTripsEveryNonNanHalf) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(h & 0x7c00u, 0x7c00u);
      EXPECT_NE(h & 0x03ffu, 0u);
      continue;
    }
    EXPECT_EQ(Fp32ToFp16(f), h) << "half 0x" << std::hex << h;
  }
}

// Checks the rounding of random floats against the definition: the chosen
// half is at least as close as both neighbours, and on a tie it is even.
TEST(TypeTest, Fp16IsNearestOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exp_dist(-27.0f, 16.5f);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = std::ldexp(mant(rng), static_cast<int>(exp_dist(rng))) *
                    (i % 2 ? 1.0f : -1.0f);
    const uint16_t h = Fp32ToFp16(f);
    const double got = Fp16ToFp32(h);
    const double err = std::fabs(got - f);
    if (std::isinf(got)) {
      EXPECT_GE(std::fabs(f), 65520.0f);
      continue;
    }
    for (int d : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(h + d);
      // Stay within the same sign and below infinity.
      if ((n & 0x8000) != (h & 0x8000) || (n & 0x7fff) >= 0x7c00) continue;
      const double other = std::fabs(static_cast<double>(Fp16ToFp32(n)) - f);
      EXPECT_LE(err, other) << f;
      if (err == other) {
        EXPECT_EQ(h & 1, 0) << f;
      }
    }
  }
}

TEST(TypeTest, Bf16KnownValuesAndRounding) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Fp32ToBf16(-2.0f), 0xc000);
  EXPECT_EQ(Bf16ToFp32(0x3f80), 1.0f);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f818000u)), 0x3f82);  // tie -> even
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808001u)), 0x3f81);  // above tie
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f807fffu)), 0x3f80);  // below tie
  EXPECT_EQ(Fp32ToBf16(FromBits(0x00000001u)), 0x0000);  // tiny subnormal
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7f7fffffu)), 0x7f80);  // rounds to inf
}

TEST(TypeTest, Bf16PreservesSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Fp32ToBf16(inf), 0x7f80);
  EXPECT_EQ(Fp32ToBf16(-inf), 0xff80);
  EXPECT_EQ(Fp32ToBf16(-0.0f), 0x8000);
  // NaNs whose payload would round away stay NaN.
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(FromBits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(FromBits(0x7fffffffu)))));
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(std::nanf("")))));
}

TEST(TypeTest, Bf16RoundTripsEveryNonNanValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = Bf16ToFp32(static_cast<uint16_t>(h));
    EXPECT_EQ(ToBits(f), h << 16);
    if (std::isnan(f)) continue;
    EXPECT_EQ(Fp32ToBf16(f), h);
  }
}

std::vector<uint8_t> Bytes(const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

TEST(TypeTest, Q8_0BlockLayout) {
  // absmax 127 -> d = 1, q = x exactly.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>((j - 16) * 3);
  x[5] = -127.0f;
  BlockQ8_0 block;
  QuantizeRowQ8_0(x, &block, 32);
  const std::vector<uint8_t> bytes = Bytes(&block, sizeof(block));
  ASSERT_EQ(bytes.size(), 34u);
  EXPECT_EQ(bytes[0], 0x00);  // fp16 1.0 = 0x3c00, little-endian, first
  EXPECT_EQ(bytes[1], 0x3c);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(static_cast<int8_t>(bytes[2 + j]), static_cast<int>(x[j])) << j;
  }
  float y[32];
  DequantizeRowQ8_0(&block, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

TEST(TypeTest, Q8_0ScaleIsAbsmaxOver127) {
  float x[32] = {};
  x[3] = 2.0f;
  x[9] = -10.0f;
  BlockQ8_0 block;
  QuantizeRowQ8_0(x, &block, 32);
  EXPECT_EQ(block.d, Fp32ToFp16(10.0f / 127.0f));
  EXPECT_EQ(block.qs[9], -127);
  EXPECT_EQ(block.qs[3], 25);  // 2 * 12.7 = 25.4
  EXPECT_EQ(block.qs[0], 0);
}

TEST(TypeTest, Q4_0BlockLayoutWithNegativeMaximum) {
  // max-magnitude value -8 -> d = 1, q = x + 8 exactly.
  float x[32];
  for (int j = 0; j < 16; ++j) {
    x[j] = static_cast<float>(j - 8);       // -8..7
    x[j + 16] = static_cast<float>(7 - j);  // 7..-8
  }
  BlockQ4_0 block;
  QuantizeRowQ4_0(x, &block, 32);
  const std::vector<uint8_t> bytes = Bytes(&block, sizeof(block));
  ASSERT_EQ(bytes.size(), 18u);
  EXPECT_EQ(bytes[0], 0x00);  // fp16 1.0 = 0x3c00, little-endian
  EXPECT_EQ(bytes[1], 0x3c);
  for (int j = 0; j < 16; ++j) {
    const int lo = j;       // x[j] + 8
    const int hi = 15 - j;  // x[j + 16] + 8
    EXPECT_EQ(bytes[2 + j], lo | (hi << 4)) << j;
  }
  float y[32];
  DequantizeRowQ4_0(&block, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
}

TEST(TypeTest, Q4_0ClampsTheOppositeExtreme) {
  // max-magnitude value +8 -> d = -1; -8 maps to 16.5 -> clamped to 15,
  // which dequantizes to (15 - 8) * -1 = -7.
  float x[32] = {};
  x[0] = 8.0f;
  x[1] = -8.0f;
  x[17] = 3.0f;
  BlockQ4_0 block;
  QuantizeRowQ4_0(x, &block, 32);
  EXPECT_EQ(Fp16ToFp32(block.d), -1.0f);
  EXPECT_EQ(block.qs[0] & 0x0f, 0);   // 8 / -1 + 8.5 = 0.5 -> 0
  EXPECT_EQ(block.qs[1] & 0x0f, 15);  // clamped
  EXPECT_EQ(block.qs[1] >> 4, 5);     // 3 / -1 + 8.5 = 5.5 -> 5
  EXPECT_EQ(block.qs[2], 0x88);       // zeros -> 8
  float y[32];
  DequantizeRowQ4_0(&block, y, 32);
  EXPECT_EQ(y[0], 8.0f);
  EXPECT_EQ(y[1], -7.0f);
  EXPECT_EQ(y[17], 3.0f);
}

TEST(TypeTest, QuantizeZeroBlocks) {
  float x[32] = {};
  BlockQ8_0 q8;
  QuantizeRowQ8_0(x, &q8, 32);
  EXPECT_EQ(Fp16ToFp32(q8.d), 0.0f);
  for (int8_t q : q8.qs) EXPECT_EQ(q, 0);
  BlockQ4_0 q4;
  QuantizeRowQ4_0(x, &q4, 32);
  EXPECT_EQ(Fp16ToFp32(q4.d), 0.0f);
  for (uint8_t q : q4.qs) EXPECT_EQ(q, 0x88);
  float y[32];
  DequantizeRowQ4_0(&q4, y, 32);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

std::vector<float> RandomValues(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(TypeTest, Q8_0RoundTripErrorWithinHalfStep) {
  constexpr int kN = 32 * 64;
  const std::vector<float> x = RandomValues(kN, 1);
  std::vector<BlockQ8_0> q(kN / 32);
  std::vector<float> y(kN);
  QuantizeRowQ8_0(x.data(), q.data(), kN);
  DequantizeRowQ8_0(q.data(), y.data(), kN);
  for (int b = 0; b < kN / 32; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j)
      amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const double d = amax / 127.0;
    const double d16 = Fp16ToFp32(q[b].d);
    // Half a step, plus what storing d as fp16 costs at |q| <= 127.
    const double bound = d / 2 + 127 * std::fabs(d - d16) + 1e-6 * amax;
    for (int j = 0; j < 32; ++j) {
      EXPECT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), bound)
          << "block " << b << " value " << j;
    }
  }
}

TEST(TypeTest, Q4_0RoundTripErrorWithinOneStep) {
  constexpr int kN = 32 * 64;
  const std::vector<float> x = RandomValues(kN, 2);
  std::vector<BlockQ4_0> q(kN / 32);
  std::vector<float> y(kN);
  QuantizeRowQ4_0(x.data(), q.data(), kN);
  DequantizeRowQ4_0(q.data(), y.data(), kN);
  for (int b = 0; b < kN / 32; ++b) {
    float max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[b * 32 + j]) > std::fabs(max)) max = x[b * 32 + j];
    }
    const double d = std::fabs(max / 8.0);
    const double d16 = std::fabs(Fp16ToFp32(q[b].d));
    const double bound = d + 8 * std::fabs(d - d16) + 1e-6 * std::fabs(max);
    for (int j = 0; j < 32; ++j) {
      EXPECT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), bound)
          << "block " << b << " value " << j;
    }
  }
}

TEST(TypeTest, RowConversionsMatchScalarFunctions) {
  const std::vector<float> x = RandomValues(64, 3);
  std::vector<uint8_t> buf(64 * 4);
  std::vector<float> y(64);

  RowFromFloat(Type::kF32, x.data(), buf.data(), 64);
  RowToFloat(Type::kF32, buf.data(), y.data(), 64);
  EXPECT_EQ(y, x);

  RowFromFloat(Type::kF16, x.data(), buf.data(), 64);
  RowToFloat(Type::kF16, buf.data(), y.data(), 64);
  for (int i = 0; i < 64; ++i) {
    uint16_t h;
    std::memcpy(&h, buf.data() + 2 * i, 2);
    EXPECT_EQ(h, Fp32ToFp16(x[i]));
    EXPECT_EQ(y[i], Fp16ToFp32(Fp32ToFp16(x[i])));
  }

  RowFromFloat(Type::kBF16, x.data(), buf.data(), 64);
  RowToFloat(Type::kBF16, buf.data(), y.data(), 64);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(y[i], Bf16ToFp32(Fp32ToBf16(x[i])));
  }

  std::vector<BlockQ8_0> q8(2);
  QuantizeRowQ8_0(x.data(), q8.data(), 64);
  RowFromFloat(Type::kQ8_0, x.data(), buf.data(), 64);
  EXPECT_EQ(std::memcmp(buf.data(), q8.data(), 2 * sizeof(BlockQ8_0)), 0);
  std::vector<float> want(64);
  DequantizeRowQ8_0(q8.data(), want.data(), 64);
  RowToFloat(Type::kQ8_0, buf.data(), y.data(), 64);
  EXPECT_EQ(y, want);

  std::vector<BlockQ4_0> q4(2);
  QuantizeRowQ4_0(x.data(), q4.data(), 64);
  RowFromFloat(Type::kQ4_0, x.data(), buf.data(), 64);
  EXPECT_EQ(std::memcmp(buf.data(), q4.data(), 2 * sizeof(BlockQ4_0)), 0);
  DequantizeRowQ4_0(q4.data(), want.data(), 64);
  RowToFloat(Type::kQ4_0, buf.data(), y.data(), 64);
  EXPECT_EQ(y, want);
}

TEST(TypeTest, I32ConvertsThroughStaticCast) {
  const float x[4] = {3.7f, -2.9f, 0.0f, 1e6f};
  int32_t q[4];
  RowFromFloat(Type::kI32, x, q, 4);
  EXPECT_EQ(q[0], 3);
  EXPECT_EQ(q[1], -2);
  EXPECT_EQ(q[2], 0);
  EXPECT_EQ(q[3], 1000000);
  const int32_t i[3] = {-5, 7, 16777217};
  float y[3];
  RowToFloat(Type::kI32, i, y, 3);
  EXPECT_EQ(y[0], -5.0f);
  EXPECT_EQ(y[1], 7.0f);
  EXPECT_EQ(y[2], 16777216.0f);  // nearest float
}

}  // namespace
}  // namespace tessera
