#ifndef TESSERA_GRAPH_BLOCK_QUANT_H_
#define TESSERA_GRAPH_BLOCK_QUANT_H_

// ggml's 32-value blocks with an offset or a fifth bit (Q4_1, Q5_0, Q5_1),
// byte for byte, with their reference quantizers and dequantizers (Q8_0 and
// Q4_0 are in graph/type.h). fp16 fields are IEEE binary16 bit patterns.
//
// Value j (0..15) of a block takes its low 4 bits from the low nibble of
// qs[j], value j + 16 from the high nibble of qs[j]; Q5's fifth bit of value
// i (0..31) is bit i of the little-endian 32-bit word qh. The level q of a
// value is then
//   Q4_1: x = d * q + m, q in 0..15
//   Q5_0: x = d * (q - 16), q in 0..31
//   Q5_1: x = d * q + m, q in 0..31
// d * q is exact in float (a level of at most 5 bits times an fp16 scale),
// so d * q + m is rounded once whether or not it is a fused multiply-add.

#include <cstdint>
#include <cstring>

namespace tessera {

inline constexpr int64_t kQK5 = 32;  // values per Q4_1, Q5_0 or Q5_1 block

struct BlockQ4_1 {
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 minimum
  uint8_t qs[kQK5 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // fifth bits
  uint8_t qs[kQK5 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// The 32 levels of a block from its nibbles qs and fifth bits qh (null for
// Q4_1, whose levels are the nibbles).
inline void UnpackBlockLevels(const uint8_t* qs, const uint8_t* qh,
                              uint8_t* q) {
  uint32_t high = 0;
  if (qh != nullptr) std::memcpy(&high, qh, sizeof(high));
  for (int j = 0; j < kQK5 / 2; ++j) {
    q[j] = static_cast<uint8_t>((qs[j] & 0x0F) | (((high >> j) & 1) << 4));
    q[j + kQK5 / 2] = static_cast<uint8_t>(
        (qs[j] >> 4) | (((high >> (j + kQK5 / 2)) & 1) << 4));
  }
}

// Quantize/dequantize `n` values (`n` a multiple of 32) as ggml's reference
// quantizers do:
//   Q4_1, Q5_1: m = the block's minimum, d = (max - m) / 15 (or / 31),
//     q = trunc((x - m) / d + 0.5) clamped to the levels;
//   Q5_0: with v the value of largest magnitude (its sign kept),
//     d = v / -16, q = min(31, trunc(x / d + 16.5)).
// Non-finite input gives defined (meaningless) levels.
void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t n);
void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t n);
void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n);
void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t n);
void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n);
void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t n);

}  // namespace tessera

#endif  // TESSERA_GRAPH_BLOCK_QUANT_H_
