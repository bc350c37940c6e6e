#include "graph/block_quant.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "graph/type.h"

namespace tessera {
namespace {

constexpr int kHalf = kQK5 / 2;

// trunc(v) for v clamped to [0, top]; NaN becomes 0.
uint8_t Level(float v, float top) {
  return static_cast<uint8_t>(std::fminf(std::fmaxf(v, 0.0f), top));
}

// Packs 32 levels: low nibbles into qs, fifth bits into qh (when not null).
void PackLevels(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + kHalf] & 0x0F) << 4));
    high |= static_cast<uint32_t>(q[j] >> 4) << j;
    high |= static_cast<uint32_t>(q[j + kHalf] >> 4) << (j + kHalf);
  }
  if (qh != nullptr) std::memcpy(qh, &high, sizeof(high));
}

// The affine fit of Q4_1 and Q5_1 (levels 0..top) for one block.
void QuantizeAffine(const float* x, float top, uint16_t* d16, uint16_t* m16,
                    uint8_t* q) {
  float min = FLT_MAX;
  float max = -FLT_MAX;
  for (int j = 0; j < kQK5; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / top;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d16 = Fp32ToFp16(d);
  *m16 = Fp32ToFp16(min);
  for (int j = 0; j < kQK5; ++j) q[j] = Level((x[j] - min) * id + 0.5f, top);
}

void DequantizeAffine(uint16_t d16, uint16_t m16, const uint8_t* q, float* y) {
  const float d = Fp16ToFp32(d16);
  const float m = Fp16ToFp32(m16);
  for (int j = 0; j < kQK5; ++j) y[j] = q[j] * d + m;
}

}  // namespace

void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5; ++i) {
    uint8_t q[kQK5];
    QuantizeAffine(x + i * kQK5, 15.0f, &y[i].d, &y[i].m, q);
    PackLevels(q, y[i].qs, nullptr);
  }
}

void DequantizeRowQ4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5; ++i) {
    uint8_t q[kQK5];
    UnpackBlockLevels(x[i].qs, nullptr, q);
    DequantizeAffine(x[i].d, x[i].m, q, y + i * kQK5);
  }
}

void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5; ++i) {
    const float* xb = x + i * kQK5;
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK5; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    uint8_t q[kQK5];
    for (int j = 0; j < kQK5; ++j) q[j] = Level(xb[j] * id + 16.5f, 31.0f);
    PackLevels(q, y[i].qs, y[i].qh);
  }
}

void DequantizeRowQ5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5; ++i) {
    uint8_t q[kQK5];
    UnpackBlockLevels(x[i].qs, x[i].qh, q);
    const float d = Fp16ToFp32(x[i].d);
    for (int j = 0; j < kQK5; ++j) y[i * kQK5 + j] = (q[j] - 16) * d;
  }
}

void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5; ++i) {
    uint8_t q[kQK5];
    QuantizeAffine(x + i * kQK5, 31.0f, &y[i].d, &y[i].m, q);
    PackLevels(q, y[i].qs, y[i].qh);
  }
}

void DequantizeRowQ5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5; ++i) {
    uint8_t q[kQK5];
    UnpackBlockLevels(x[i].qs, x[i].qh, q);
    DequantizeAffine(x[i].d, x[i].m, q, y + i * kQK5);
  }
}

}  // namespace tessera
