#include "graph/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "graph/type.h"

namespace tessera {
namespace {

constexpr int kSub = 32;   // values per Q4_K/Q5_K sub-block
constexpr int kSub6 = 16;  // values per Q6_K sub-block
constexpr float kTiny = 1e-15f;

// Rounds to nearest (ties to even) and clamps to [lo, hi]; NaN becomes lo.
int RoundClamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::nearbyint(v));
}

// Fits x[0..n) ~= a * L + b with L in 0..nmax, a >= 0 and b <= 0 (the
// K-quant min is stored as a non-negative amount subtracted). Steps:
//  1. lo = min(x, 0), hi = max(x); a constant sub-block gets a = 0, b = lo.
//  2. For grids of nmax + s steps over [lo, hi], s = -1.0, -0.9, .., +1.0,
//     round every value to the grid, then solve least squares for (a, b)
//     given those levels (with b forced to 0 when it comes out positive).
//  3. Keep the (a, b) of least squared error (each value rounded to its
//     nearest level of that pair), the plain grid over [lo, hi] included.
void FitAffine(const float* x, int n, int nmax, float* a, float* b) {
  float lo = 0.0f;
  float hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (!(hi - lo > kTiny)) {
    *a = 0.0f;
    *b = std::isfinite(lo) ? lo : 0.0f;
    return;
  }
  // Squared error of (sa, sb) with every value rounded to its own level.
  auto error = [&](float sa, float sb) {
    const float inv = 1.0f / sa;
    float e = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = RoundClamp((x[i] - sb) * inv, 0, nmax);
      const float diff = sa * l + sb - x[i];
      e += diff * diff;
    }
    return e;
  };
  float best_a = (hi - lo) / nmax;
  float best_b = lo;
  float best = error(best_a, best_b);
  for (int s = -10; s <= 10; ++s) {
    const float inv = (nmax + 0.1f * s) / (hi - lo);
    float sl = 0.0f, sll = 0.0f, sx = 0.0f, sxl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float l =
          static_cast<float>(RoundClamp((x[i] - lo) * inv, 0, nmax));
      sl += l;
      sll += l * l;
      sx += x[i];
      sxl += x[i] * l;
    }
    const float det = n * sll - sl * sl;
    if (!(det > 0.0f)) continue;
    float ca = (n * sxl - sl * sx) / det;
    float cb = (sll * sx - sl * sxl) / det;
    if (cb > 0.0f) {
      cb = 0.0f;
      ca = sxl / sll;
    }
    if (!(ca > 0.0f)) continue;
    const float e = error(ca, cb);
    if (e < best) {
      best = e;
      best_a = ca;
      best_b = cb;
    }
  }
  *a = best_a;
  *b = best_b;
}

// Fits x[0..n) ~= a * L with L in -32..31 (Q6_K). The value of largest
// magnitude goes to -32 on the first grid; grids of 32 + s / 10 steps,
// s = -9..9, are tried and a least-squares scale taken for each; the one
// of least squared error wins. Returns 0 for an all-zero sub-block.
float FitSymmetric(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (!(amax > kTiny)) return 0.0f;
  float best_a = max / -32.0f;
  float best_merit = -1.0f;  // sum(x L)^2 / sum(L^2): larger is better
  for (int s = -9; s <= 9; ++s) {
    const float inv = -(32.0f + 0.1f * s) / max;
    float sxl = 0.0f, sll = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(RoundClamp(x[i] * inv, -32, 31));
      sxl += x[i] * l;
      sll += l * l;
    }
    if (!(sll > 0.0f)) continue;
    const float merit = sxl * sxl / sll;
    if (merit > best_merit) {
      best_merit = merit;
      best_a = sxl / sll;
    }
  }
  return best_a;
}

// Quantizes one super-block of Q4_K (nmax 15) or Q5_K (nmax 31) to levels
// L[256] with packed scales and fp16 d, dmin:
//  1. Fit each sub-block (FitAffine).
//  2. d = max(a) / 63, dmin = max(-b) / 63; 6-bit sc = round(a / d),
//     m = round(-b / dmin).
//  3. Requantize each value with the stored (rounded) scales.
void QuantizeSuperAffine(const float* x, int nmax, uint16_t* d16,
                         uint16_t* dmin16, uint8_t packed[kKScaleBytes],
                         uint8_t levels[kQK_K]) {
  float a[8], b[8];
  float max_a = 0.0f, max_m = 0.0f;
  for (int j = 0; j < 8; ++j) {
    FitAffine(x + kSub * j, kSub, nmax, &a[j], &b[j]);
    max_a = std::max(max_a, a[j]);
    max_m = std::max(max_m, -b[j]);
  }
  const float inv_a = max_a > 0.0f ? 63.0f / max_a : 0.0f;
  const float inv_m = max_m > 0.0f ? 63.0f / max_m : 0.0f;
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(RoundClamp(a[j] * inv_a, 0, 63));
    m[j] = static_cast<uint8_t>(RoundClamp(-b[j] * inv_m, 0, 63));
  }
  PackKScaleMin(sc, m, packed);
  *d16 = Fp32ToFp16(max_a / 63.0f);
  *dmin16 = Fp32ToFp16(max_m / 63.0f);
  const float d = Fp16ToFp32(*d16);
  const float dmin = Fp16ToFp32(*dmin16);
  for (int j = 0; j < 8; ++j) {
    const float step = d * sc[j];
    const float offset = dmin * m[j];
    for (int i = 0; i < kSub; ++i) {
      levels[kSub * j + i] = static_cast<uint8_t>(
          step != 0.0f ? RoundClamp((x[kSub * j + i] + offset) / step, 0, nmax)
                       : 0);
    }
  }
}

// The 4-bit layout shared by Q4_K and Q5_K: low nibbles of qs from the
// levels, and (for Q5_K, qh != nullptr) the fifth bits.
void PackLow4(const uint8_t levels[kQK_K], uint8_t* qs, uint8_t* qh) {
  if (qh != nullptr) std::memset(qh, 0, kQK_K / 8);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = levels[64 * c + l];
      const uint8_t hi = levels[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      if (qh != nullptr) {
        qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) |
                                      ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

// The inverse of QuantizeSuperAffine + PackLow4: a super-block of Q4_K or
// (qh != nullptr) Q5_K, each value d * scale * level - dmin * min.
void DequantizeSuperAffine(uint16_t d16, uint16_t dmin16,
                           const uint8_t scales[kKScaleBytes],
                           const uint8_t* qs, const uint8_t* qh, float* out) {
  const float d = Fp16ToFp32(d16);
  const float dmin = Fp16ToFp32(dmin16);
  for (int c = 0; c < 4; ++c) {
    int sc0, m0, sc1, m1;
    UnpackKScaleMin(scales, 2 * c, &sc0, &m0);
    UnpackKScaleMin(scales, 2 * c + 1, &sc1, &m1);
    for (int l = 0; l < 32; ++l) {
      const uint8_t q = qs[32 * c + l];
      int lo = q & 0x0F;
      int hi = q >> 4;
      if (qh != nullptr) {
        lo |= ((qh[l] >> (2 * c)) & 1) << 4;
        hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      out[64 * c + l] = d * sc0 * lo - dmin * m0;
      out[64 * c + 32 + l] = d * sc1 * hi - dmin * m1;
    }
  }
}

}  // namespace

void PackKScaleMin(const uint8_t scale[8], const uint8_t min[8],
                   uint8_t packed[kKScaleBytes]) {
  for (int j = 0; j < 4; ++j) {
    packed[j] =
        static_cast<uint8_t>((scale[j] & 63) | ((scale[j + 4] >> 4) << 6));
    packed[j + 4] =
        static_cast<uint8_t>((min[j] & 63) | ((min[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0x0F) |
                                         ((min[j + 4] & 0x0F) << 4));
  }
}

void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, int64_t n) {
  uint8_t levels[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    QuantizeSuperAffine(x + i * kQK_K, 15, &y[i].d, &y[i].dmin, y[i].scales,
                        levels);
    PackLow4(levels, y[i].qs, nullptr);
  }
}

void DequantizeRowQ4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    DequantizeSuperAffine(x[i].d, x[i].dmin, x[i].scales, x[i].qs, nullptr,
                          y + i * kQK_K);
  }
}

void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, int64_t n) {
  uint8_t levels[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    QuantizeSuperAffine(x + i * kQK_K, 31, &y[i].d, &y[i].dmin, y[i].scales,
                        levels);
    PackLow4(levels, y[i].qs, y[i].qh);
  }
}

void DequantizeRowQ5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    DequantizeSuperAffine(x[i].d, x[i].dmin, x[i].scales, x[i].qs, x[i].qh,
                          y + i * kQK_K);
  }
}

// Q6_K per super-block:
//  1. Fit each sub-block of 16 symmetrically (FitSymmetric).
//  2. d = s / -128 with s the fitted scale of largest magnitude (so that it
//     is stored as -128); int8 scales = round(a / d) clamped to 127.
//  3. Requantize each value with the stored scales to -32..31, kept + 32.
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    BlockQ6_K& b = y[i];
    std::memset(&b, 0, sizeof(b));
    float a[kQK_K / kSub6];
    float big = 0.0f;
    for (int j = 0; j < kQK_K / kSub6; ++j) {
      a[j] = FitSymmetric(xb + kSub6 * j, kSub6);
      if (std::fabs(a[j]) > std::fabs(big)) big = a[j];
    }
    uint8_t levels[kQK_K];
    std::memset(levels, 32, sizeof(levels));  // all zero values
    if (std::fabs(big) > kTiny) {
      const float inv = -128.0f / big;
      for (int j = 0; j < kQK_K / kSub6; ++j) {
        b.scales[j] = static_cast<int8_t>(RoundClamp(a[j] * inv, -128, 127));
      }
      b.d = Fp32ToFp16(1.0f / inv);
      const float d = Fp16ToFp32(b.d);
      for (int j = 0; j < kQK_K / kSub6; ++j) {
        const float step = d * b.scales[j];
        if (step == 0.0f) continue;
        for (int l = 0; l < kSub6; ++l) {
          levels[kSub6 * j + l] = static_cast<uint8_t>(
              RoundClamp(xb[kSub6 * j + l] / step, -32, 31) + 32);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      for (int t = 0; t < 4; ++t) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t q = levels[128 * h + 32 * t + l];
          b.ql[64 * h + 32 * (t % 2) + l] |=
              static_cast<uint8_t>((q & 0x0F) << (4 * (t / 2)));
          b.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * t));
        }
      }
    }
  }
}

void DequantizeRowQ6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ6_K& b = x[i];
    const float d = Fp16ToFp32(b.d);
    float* out = y + i * kQK_K;
    for (int h = 0; h < 2; ++h) {
      for (int t = 0; t < 4; ++t) {
        for (int l = 0; l < 32; ++l) {
          const int v = 128 * h + 32 * t + l;
          const int lo =
              (b.ql[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 0x0F;
          const int hi = (b.qh[32 * h + l] >> (2 * t)) & 3;
          out[v] = d * b.scales[v / kSub6] * ((lo | (hi << 4)) - 32);
        }
      }
    }
  }
}

}  // namespace tessera
