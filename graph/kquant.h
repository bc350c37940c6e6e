#ifndef TESSERA_GRAPH_KQUANT_H_
#define TESSERA_GRAPH_KQUANT_H_

// ggml's K-quant block layouts (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), byte for
// byte, with their reference quantizers and dequantizers. A super-block holds
// kQK_K = 256 values; fp16 fields are IEEE binary16 bit patterns
// (graph/type.h).
//
// Q4_K and Q5_K: 8 sub-blocks of 32 values; sub-block j has a 6-bit scale
// sc[j] and a 6-bit min m[j], and value i of sub-block j is
//   d * sc[j] * q - dmin * m[j]
// with q in 0..15 (Q4_K) or 0..31 (Q5_K). The 64 values 64c .. 64c + 63
// (c = 0..3, sub-blocks 2c and 2c + 1) take their low 4 bits from
// qs[32c + l], l = 0..31: value 64c + l from the low nibble, value
// 64c + 32 + l from the high nibble. Q5_K's fifth bit of value 64c + l is
// bit 2c of qh[l], of value 64c + 32 + l bit 2c + 1 of qh[l].
//
// Q2_K and Q3_K: 16 sub-blocks of 16 values, two bits of each value's
// level in qs: value 128h + 32j + l (h = 0..1, j = 0..3, l = 0..31) takes
// bits 2j, 2j + 1 of qs[32h + l]. Q2_K: sub-block g has a 4-bit scale
// (low nibble of scales[g]) and a 4-bit min (high nibble), value =
//   d * scale * q - dmin * min, q in 0..3.
// Q3_K: the level's third bit is bit 4h + j of hmask[l]; sub-block g has a
// 6-bit scale s (low 4 bits: the low nibble of scales[g] for g < 8, the
// high nibble of scales[g - 8] above; top 2 bits: bits 2(g / 4), +1 of
// scales[8 + g % 4]), value = d * (s - 32) * (q - 4), q in 0..7.
//
// Q6_K: 16 sub-blocks of 16 values with int8 scales; value i is
//   d * scales[i / 16] * (q - 32), q in 0..63.
// Half h (values 128h .. 128h + 127) uses ql[64h ..], qh[32h ..]; for
// l = 0..31 and t = 0..3, value 128h + 32t + l has its low 4 bits in
// ql[64h + 32(t % 2) + l] (low nibble for t < 2, high nibble for t >= 2)
// and its high 2 bits in bits 2t, 2t + 1 of qh[32h + l].

#include <cstdint>
#include <cstring>

namespace tessera {

inline constexpr int64_t kQK_K = 256;
inline constexpr int kKScaleBytes = 12;

struct BlockQ4_K {
  uint16_t d;                    // fp16 scale of the 6-bit scales
  uint16_t dmin;                 // fp16 scale of the 6-bit mins
  uint8_t scales[kKScaleBytes];  // 8 scales and 8 mins, 6 bits each
  uint8_t qs[kQK_K / 2];         // low 4 bits
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];  // fifth bits
  uint8_t qs[kQK_K / 2];  // low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // scale | min << 4 per sub-block of 16
  uint8_t qs[kQK_K / 4];       // two bits per value
  uint16_t d;                  // fp16 scale of the scales
  uint16_t dmin;               // fp16 scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84);

struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];      // third bits
  uint8_t qs[kQK_K / 4];         // low two bits
  uint8_t scales[kKScaleBytes];  // 16 6-bit scales
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // one per 16 values
  uint16_t d;                 // fp16 scale of the scales (last)
};
static_assert(sizeof(BlockQ6_K) == 210);

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes:
// sub-blocks 0..3 keep theirs in the low 6 bits of bytes j (scale) and
// j + 4 (min); sub-blocks 4..7 keep their low 4 bits in byte j + 4 (scale
// in the low nibble, min in the high) and their top 2 bits in the top 2
// bits of bytes j - 4 (scale) and j (min).
inline void UnpackKScaleMin(const uint8_t* packed, int j, int* scale,
                            int* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = (packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

// UnpackKScaleMin for all eight sub-blocks at once, from the packed bytes'
// 32-bit words: byte j (little-endian) of *scales and of *mins is sub-block
// j's scale and min.
inline void UnpackKScalesMins(const uint8_t* packed, uint64_t* scales,
                              uint64_t* mins) {
  uint32_t w[3];
  std::memcpy(w, packed, sizeof(w));
  const uint32_t low6 = 0x3F3F3F3F, low4 = 0x0F0F0F0F, low2 = 0x03030303;
  *scales = (w[0] & low6) |
            uint64_t{(w[2] & low4) | (((w[0] >> 6) & low2) << 4)} << 32;
  *mins = (w[1] & low6) |
          uint64_t{((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4)} << 32;
}

// Q3_K's 6-bit scale of sub-block g (0..15), 0..63 (the value uses it
// less 32), from its 12 packed bytes.
inline int UnpackQ3KScale(const uint8_t* packed, int g) {
  const int low = g < 8 ? packed[g] & 0x0F : packed[g - 8] >> 4;
  const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
  return low | (high << 4);
}

// The inverse of UnpackKScaleMin for 8 scales and 8 mins in 0..63.
void PackKScaleMin(const uint8_t scale[8], const uint8_t min[8],
                   uint8_t packed[kKScaleBytes]);

// Quantize/dequantize `n` values (`n` a multiple of 256). The quantizers fit
// each sub-block by least squares over a few candidate grids (an affine fit
// with a non-positive offset for Q2_K/Q4_K/Q5_K, a symmetric one for
// Q3_K/Q6_K), then
// quantize the sub-block scales against the super-block's largest and
// requantize the values with the stored scales.
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n);
void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n);
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n);
void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t n);
void QuantizeRowQ2_K(const float* x, BlockQ2_K* y, int64_t n);
void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t n);
void QuantizeRowQ3_K(const float* x, BlockQ3_K* y, int64_t n);
void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t n);
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n);
void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t n);

}  // namespace tessera

#endif  // TESSERA_GRAPH_KQUANT_H_
