#include "graph/kquant.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// The scales and mins of the hand-built Q4_K/Q5_K blocks, and their 12
// packed bytes worked out by hand from the layout:
//   bytes 0..3:  scale j (low 6 bits) | top 2 bits of scale j + 4
//   bytes 4..7:  min j (low 6 bits)   | top 2 bits of min j + 4
//   bytes 8..11: low 4 bits of scale j + 4 | low 4 bits of min j + 4 << 4
constexpr uint8_t kScales[8] = {1, 2, 3, 4, 33, 18, 63, 5};
constexpr uint8_t kMins[8] = {0, 5, 10, 63, 17, 34, 48, 7};
constexpr uint8_t kPacked[12] = {0x81, 0x42, 0xC3, 0x04, 0x40, 0x85,
                                 0xCA, 0x3F, 0x11, 0x22, 0x0F, 0x75};

// Writes a Q4_K/Q5_K header at the start of `raw`: d = 1, dmin = 0.5.
void PutHeader(uint8_t* raw) {
  raw[0] = 0x00;  // d = fp16 0x3C00
  raw[1] = 0x3C;
  raw[2] = 0x00;  // dmin = fp16 0x3800
  raw[3] = 0x38;
  std::memcpy(raw + 4, kPacked, sizeof(kPacked));
}

// Sets the 4-bit quants at byte offset `qs` of a Q4_K/Q5_K block.
void PutNibbles(uint8_t* raw, int qs) {
  raw[qs + 0] = 0x3A;   // value 0: 10 (sub 0), value 32: 3 (sub 1)
  raw[qs + 37] = 0xF1;  // value 69: 1 (sub 2), value 101: 15 (sub 3)
  raw[qs + 95] = 0x27;  // value 159: 7 (sub 4), value 191: 2 (sub 5)
  raw[qs + 96] = 0x9C;  // value 192: 12 (sub 6), value 224: 9 (sub 7)
}

double Nmse(const std::vector<float>& want, const std::vector<float>& got) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (want[i] - got[i]) * (want[i] - got[i]);
    norm += want[i] * want[i];
  }
  return err / norm;
}

// ggml's test-quantize-fns data: 0.1 + 2 cos(i + offset).
std::vector<float> CosRow(int64_t n, float offset) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = 0.1f + 2.0f * std::cos(i + offset);
  return x;
}

std::vector<float> GaussianRow(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

double RoundTripNmse(Type type, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(RowSize(type, n));
  RowFromFloat(type, x.data(), q.data(), n);
  std::vector<float> y(n);
  RowToFloat(type, q.data(), y.data(), n);
  return Nmse(x, y);
}

TEST(KQuantTest, TraitsMatchGgml) {
  EXPECT_EQ(Traits(Type::kQ4_K).type_size, 144u);
  EXPECT_EQ(Traits(Type::kQ5_K).type_size, 176u);
  EXPECT_EQ(Traits(Type::kQ6_K).type_size, 210u);
  EXPECT_EQ(Traits(Type::kQ2_K).type_size, 84u);
  EXPECT_EQ(Traits(Type::kQ3_K).type_size, 110u);
  for (Type t :
       {Type::kQ2_K, Type::kQ3_K, Type::kQ4_K, Type::kQ5_K, Type::kQ6_K}) {
    EXPECT_EQ(Traits(t).block_size, 256);
    EXPECT_TRUE(Traits(t).is_quantized);
    EXPECT_TRUE(IsKQuant(t));
  }
  EXPECT_EQ(TypeName(Type::kQ2_K), "q2_K");
  EXPECT_EQ(TypeName(Type::kQ3_K), "q3_K");
  EXPECT_EQ(TypeName(Type::kQ4_K), "q4_K");
  EXPECT_EQ(TypeName(Type::kQ5_K), "q5_K");
  EXPECT_EQ(TypeName(Type::kQ6_K), "q6_K");
  EXPECT_EQ(RowSize(Type::kQ6_K, 512), 420u);
  EXPECT_TRUE(IsValidType(8));
  EXPECT_TRUE(IsValidType(9));  // I64
  EXPECT_FALSE(IsValidType(kTypeCount));
}

// Q3_K's scale g: low 4 bits from the low nibble of byte g (g < 8) or the
// high nibble of byte g - 8, top 2 bits from bits 2 (g / 4) of byte
// 8 + g % 4. Bytes set by hand: 0x21 (scales 0 and 8 low bits 1 and 2),
// 0xF0 at byte 7 (scale 15's low bits), 0b11100100 at byte 8 (top bits 0,
// 1, 2, 3 for scales 0, 4, 8, 12), 0b11000000 at byte 11 (scale 15's top
// bits 3).
TEST(KQuantTest, Q3KScalesUnpackFromHandSetBytes) {
  uint8_t packed[12] = {};
  packed[0] = 0x21;
  packed[7] = 0xF0;
  packed[8] = 0xE4;
  packed[11] = 0xC0;
  EXPECT_EQ(UnpackQ3KScale(packed, 0), 1);
  EXPECT_EQ(UnpackQ3KScale(packed, 4), 1 << 4);
  EXPECT_EQ(UnpackQ3KScale(packed, 8), 2 | (2 << 4));
  EXPECT_EQ(UnpackQ3KScale(packed, 12), 3 << 4);
  EXPECT_EQ(UnpackQ3KScale(packed, 15), 15 | (3 << 4));
  for (int g : {1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14}) {
    EXPECT_EQ(UnpackQ3KScale(packed, g), 0) << g;
  }
}

TEST(KQuantTest, ScaleMinPackingMatchesHandWorkedBytes) {
  uint8_t packed[12];
  PackKScaleMin(kScales, kMins, packed);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(packed[i], kPacked[i]) << i;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    UnpackKScaleMin(kPacked, j, &sc, &m);
    EXPECT_EQ(sc, kScales[j]) << j;
    EXPECT_EQ(m, kMins[j]) << j;
  }
}

TEST(KQuantTest, WordwiseUnpackMatchesPerSubBlockUnpack) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 1000; ++trial) {
    uint8_t packed[12];
    for (uint8_t& b : packed) b = static_cast<uint8_t>(rng());
    uint64_t scales, mins;
    UnpackKScalesMins(packed, &scales, &mins);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      UnpackKScaleMin(packed, j, &sc, &m);
      EXPECT_EQ((scales >> (8 * j)) & 0xFF, static_cast<uint64_t>(sc)) << j;
      EXPECT_EQ((mins >> (8 * j)) & 0xFF, static_cast<uint64_t>(m)) << j;
    }
  }
}

TEST(KQuantTest, DequantizesHandBuiltQ4_K) {
  // 0..1 d | 2..3 dmin | 4..15 scales | 16..143 qs
  uint8_t raw[144] = {};
  PutHeader(raw);
  PutNibbles(raw, 16);
  BlockQ4_K block;
  std::memcpy(&block, raw, sizeof(raw));
  float y[256];
  DequantizeRowQ4_K(&block, y, 256);
  // value = d * scale * q - dmin * min
  EXPECT_EQ(y[0], 10.0f);     // 1 * 10 - 0
  EXPECT_EQ(y[32], 3.5f);     // 2 * 3 - 0.5 * 5
  EXPECT_EQ(y[69], -2.0f);    // 3 * 1 - 0.5 * 10
  EXPECT_EQ(y[101], 28.5f);   // 4 * 15 - 0.5 * 63
  EXPECT_EQ(y[159], 222.5f);  // 33 * 7 - 0.5 * 17
  EXPECT_EQ(y[191], 19.0f);   // 18 * 2 - 0.5 * 34
  EXPECT_EQ(y[192], 732.0f);  // 63 * 12 - 0.5 * 48
  EXPECT_EQ(y[224], 41.5f);   // 5 * 9 - 0.5 * 7
  // q = 0: -0.5 * min of the sub-block.
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[33], -2.5f);
  EXPECT_EQ(y[70], -5.0f);
  EXPECT_EQ(y[100], -31.5f);
  EXPECT_EQ(y[130], -8.5f);
  EXPECT_EQ(y[170], -17.0f);
  EXPECT_EQ(y[200], -24.0f);
  EXPECT_EQ(y[250], -3.5f);
}

TEST(KQuantTest, DequantizesHandBuiltQ5_K) {
  // 0..1 d | 2..3 dmin | 4..15 scales | 16..47 qh | 48..175 qs
  uint8_t raw[176] = {};
  PutHeader(raw);
  PutNibbles(raw, 48);
  raw[16 + 0] = 0x80;   // bit 7: value 224 (64 * 3 + 32 + 0)
  raw[16 + 5] = 0x0C;   // bits 2, 3: values 69 and 101
  raw[16 + 10] = 0x01;  // bit 0: value 10
  raw[16 + 31] = 0x10;  // bit 4: value 159
  BlockQ5_K block;
  std::memcpy(&block, raw, sizeof(raw));
  float y[256];
  DequantizeRowQ5_K(&block, y, 256);
  EXPECT_EQ(y[0], 10.0f);   // no fifth bit
  EXPECT_EQ(y[10], 16.0f);  // 1 * 16 - 0
  EXPECT_EQ(y[32], 3.5f);
  EXPECT_EQ(y[42], -2.5f);    // qh[10] bit 1 clear
  EXPECT_EQ(y[69], 46.0f);    // 3 * 17 - 5
  EXPECT_EQ(y[101], 92.5f);   // 4 * 31 - 31.5
  EXPECT_EQ(y[159], 750.5f);  // 33 * 23 - 8.5
  EXPECT_EQ(y[191], 19.0f);   // qh[31] bit 5 clear
  EXPECT_EQ(y[192], 732.0f);  // qh[0] bit 6 clear
  EXPECT_EQ(y[224], 121.5f);  // 5 * 25 - 3.5
}

TEST(KQuantTest, DequantizesHandBuiltQ6_K) {
  // 0..127 ql | 128..191 qh | 192..207 int8 scales | 208..209 d
  uint8_t raw[210] = {};
  const int8_t scales[16] = {1, -2,  3,  -4,  5,  -6,  7,  -8,
                             9, -10, 11, -12, 13, -14, 15, -128};
  std::memcpy(raw + 192, scales, sizeof(scales));
  raw[208] = 0x00;  // d = fp16 0x3400 = 0.25
  raw[209] = 0x34;
  raw[0] = 0x5A;         // low 4 bits of values 0 (0xA) and 64 (0x5)
  raw[128 + 0] = 0xE4;   // high 2 bits of values 0, 32, 64, 96: 0, 1, 2, 3
  raw[113] = 0xF3;       // 64 + 32 + 17: values 177 (0x3) and 241 (0xF)
  raw[128 + 49] = 0x4C;  // 32 + 17: values 145, 177, 209, 241: 0, 3, 0, 1
  BlockQ6_K block;
  std::memcpy(&block, raw, sizeof(raw));
  float y[256];
  DequantizeRowQ6_K(&block, y, 256);
  // value = d * scale * (q - 32)
  EXPECT_EQ(y[0], -5.5f);      // q 10: 0.25 * 1 * -22
  EXPECT_EQ(y[32], -12.0f);    // q 16: 0.25 * 3 * -16
  EXPECT_EQ(y[64], 6.25f);     // q 37: 0.25 * 5 * 5
  EXPECT_EQ(y[96], 28.0f);     // q 48: 0.25 * 7 * 16
  EXPECT_EQ(y[145], 80.0f);    // q 0: 0.25 * -10 * -32
  EXPECT_EQ(y[177], -57.0f);   // q 51: 0.25 * -12 * 19
  EXPECT_EQ(y[209], 112.0f);   // q 0: 0.25 * -14 * -32
  EXPECT_EQ(y[241], 32.0f);    // q 31: 0.25 * -128 * -1
  EXPECT_EQ(y[1], -8.0f);      // q 0: 0.25 * 1 * -32
  EXPECT_EQ(y[255], 1024.0f);  // q 0: 0.25 * -128 * -32
}

TEST(KQuantTest, QuantizeThenDequantizeKeepsHandBuiltBlocks) {
  // A dequantized block requantizes to values at least as close.
  uint8_t raw[144] = {};
  PutHeader(raw);
  PutNibbles(raw, 16);
  BlockQ4_K block;
  std::memcpy(&block, raw, sizeof(raw));
  std::vector<float> x(256);
  DequantizeRowQ4_K(&block, x.data(), 256);
  EXPECT_LT(RoundTripNmse(Type::kQ4_K, x), 1e-3);
}

TEST(KQuantTest, ZeroRowsStayZero) {
  const std::vector<float> zero(512, 0.0f);
  for (Type t :
       {Type::kQ2_K, Type::kQ3_K, Type::kQ4_K, Type::kQ5_K, Type::kQ6_K}) {
    std::vector<uint8_t> q(RowSize(t, 512), 0xFF);
    RowFromFloat(t, zero.data(), q.data(), 512);
    std::vector<float> y(512, 1.0f);
    RowToFloat(t, q.data(), y.data(), 512);
    for (float v : y) EXPECT_EQ(v, 0.0f) << TypeName(t);
  }
}

struct Bound {
  Type type;
  double cos_row;
  double gaussian_row;
};

TEST(KQuantTest, RoundTripNmseWithinBounds) {
  // ggml's own reference quantizers measure about 0.044 / 0.089 (Q2_K),
  // 0.0129 / 0.023 (Q3_K), 0.0019 / 0.0058 (Q4_K), 0.00058 / 0.0013 (Q5_K)
  // and 0.00014 / 0.00033 (Q6_K) on these rows.
  for (const Bound& b :
       {Bound{Type::kQ2_K, 0.045, 0.08}, Bound{Type::kQ3_K, 0.013, 0.023},
        Bound{Type::kQ4_K, 0.0022, 0.006}, Bound{Type::kQ5_K, 0.001, 0.0015},
        Bound{Type::kQ6_K, 0.0005, 0.0004}}) {
    for (float offset : {0.0f, 0.5f, 1.7f}) {
      const double nmse = RoundTripNmse(b.type, CosRow(4096, offset));
      EXPECT_LT(nmse, b.cos_row) << TypeName(b.type) << " offset " << offset;
    }
    for (unsigned seed : {1u, 2u}) {
      const double nmse = RoundTripNmse(b.type, GaussianRow(4096, seed));
      EXPECT_LT(nmse, b.gaussian_row) << TypeName(b.type) << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace tessera
