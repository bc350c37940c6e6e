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

// Rounds to nearest (ties to even) and clamps to [lo, hi] (|lo|, |hi| <
// 2^22); NaN becomes lo. The rounding is std::nearbyint's, done inline:
// adding 1.5 * 2^23 to a value under 2^22 in size leaves it no fraction
// bits. Without branches or a call of the library's nearbyint per value,
// bench/llama writes a 2-layer Q4_K model (87 MB) in 5.1 s instead of 18.
int RoundClamp(float v, int lo, int hi) {
  const float flo = static_cast<float>(lo);
  const float fhi = static_cast<float>(hi);
  v = v >= flo ? v : flo;
  v = v < fhi ? v : fhi;
  constexpr float kRound = 12582912.0f;
  return static_cast<int>((v + kRound) - kRound);
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

// Fits x[0..n) ~= a * L with L in -half..half - 1 (Q6_K: 32, Q3_K: 4). The
// value of largest magnitude goes to -half on the first grid; grids of
// half + s / 10 steps, s = -9..9, are tried and a least-squares scale taken
// for each; the one of least squared error wins. Returns 0 for an all-zero
// sub-block.
float FitSymmetric(const float* x, int n, int half) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (!(amax > kTiny)) return 0.0f;
  float best_a = max / -static_cast<float>(half);
  float best_merit = -1.0f;  // sum(x L)^2 / sum(L^2): larger is better
  for (int s = -9; s <= 9; ++s) {
    const float inv = -(static_cast<float>(half) + 0.1f * s) / max;
    float sxl = 0.0f, sll = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float l =
          static_cast<float>(RoundClamp(x[i] * inv, -half, half - 1));
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

// Fits every sub-block of 16 of a super-block symmetrically (levels
// -half..half - 1) and quantizes the fits against the one of largest
// magnitude, which is stored as -top: d = that fit / -top, scales[g] =
// round(fit / d) clamped to -top..top - 1. Returns d's fp16 bits.
uint16_t QuantizeSymmetricScales(const float* x, int half, int top,
                                 int scales[kQK_K / kSub6]) {
  float a[kQK_K / kSub6];
  float big = 0.0f;
  for (int j = 0; j < kQK_K / kSub6; ++j) {
    a[j] = FitSymmetric(x + kSub6 * j, kSub6, half);
    if (std::fabs(a[j]) > std::fabs(big)) big = a[j];
  }
  if (!(std::fabs(big) > kTiny)) {
    for (int j = 0; j < kQK_K / kSub6; ++j) scales[j] = 0;
    return 0;
  }
  const float inv = -static_cast<float>(top) / big;
  for (int j = 0; j < kQK_K / kSub6; ++j) {
    scales[j] = RoundClamp(a[j] * inv, -top, top - 1);
  }
  return Fp32ToFp16(1.0f / inv);
}

// Levels -half..half - 1 of a super-block's values, kept + half, for the
// stored d and sub-block scales (0 where a scale is 0).
void SymmetricLevels(const float* x, float d, const int scales[kQK_K / kSub6],
                     int half, uint8_t levels[kQK_K]) {
  for (int j = 0; j < kQK_K / kSub6; ++j) {
    const float step = d * scales[j];
    for (int l = 0; l < kSub6; ++l) {
      const int q = step != 0.0f
                        ? RoundClamp(x[kSub6 * j + l] / step, -half, half - 1)
                        : 0;
      levels[kSub6 * j + l] = static_cast<uint8_t>(q + half);
    }
  }
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

// Q2_K per super-block:
//  1. Fit each sub-block of 16 (FitAffine, levels 0..3).
//  2. d = max(a) / 15, dmin = max(-b) / 15; 4-bit scale = round(a / d),
//     min = round(-b / dmin).
//  3. Requantize each value with the stored scales.
void QuantizeRowQ2_K(const float* x, BlockQ2_K* y, int64_t n) {
  constexpr int kGroups = kQK_K / kSub6;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    BlockQ2_K& b = y[i];
    std::memset(&b, 0, sizeof(b));
    float a[kGroups], m[kGroups];
    float max_a = 0.0f, max_m = 0.0f;
    for (int g = 0; g < kGroups; ++g) {
      FitAffine(xb + kSub6 * g, kSub6, 3, &a[g], &m[g]);
      m[g] = -m[g];
      max_a = std::max(max_a, a[g]);
      max_m = std::max(max_m, m[g]);
    }
    const float inv_a = max_a > 0.0f ? 15.0f / max_a : 0.0f;
    const float inv_m = max_m > 0.0f ? 15.0f / max_m : 0.0f;
    b.d = Fp32ToFp16(max_a / 15.0f);
    b.dmin = Fp32ToFp16(max_m / 15.0f);
    const float d = Fp16ToFp32(b.d);
    const float dmin = Fp16ToFp32(b.dmin);
    for (int g = 0; g < kGroups; ++g) {
      const int sc = RoundClamp(a[g] * inv_a, 0, 15);
      const int mn = RoundClamp(m[g] * inv_m, 0, 15);
      b.scales[g] = static_cast<uint8_t>(sc | (mn << 4));
      const float step = d * sc;
      const float offset = dmin * mn;
      for (int l = 0; l < kSub6; ++l) {
        const int v = kSub6 * g + l;
        const int q =
            step != 0.0f ? RoundClamp((xb[v] + offset) / step, 0, 3) : 0;
        // Value 128h + 32j + l' lives in bits 2j of qs[32h + l'].
        b.qs[32 * (v / 128) + v % 32] |=
            static_cast<uint8_t>(q << (2 * ((v % 128) / 32)));
      }
    }
  }
}

void DequantizeRowQ2_K(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ2_K& b = x[i];
    const float d = Fp16ToFp32(b.d);
    const float dmin = Fp16ToFp32(b.dmin);
    for (int v = 0; v < kQK_K; ++v) {
      const int q =
          (b.qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
      const uint8_t sc = b.scales[v / kSub6];
      const float dl = d * (sc & 0x0F);
      const float ml = dmin * (sc >> 4);
      y[i * kQK_K + v] = dl * q - ml;
    }
  }
}

// Q3_K per super-block:
//  1. Fit each sub-block of 16 symmetrically (FitSymmetric, -4..3).
//  2. d = s / -32 with s the fitted scale of largest magnitude; 6-bit
//     scales = round(a / d) clamped to -32..31, stored + 32.
//  3. Requantize each value with the stored scales to -4..3, kept + 4: the
//     low two bits in qs, the third in hmask.
void QuantizeRowQ3_K(const float* x, BlockQ3_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    BlockQ3_K& b = y[i];
    std::memset(&b, 0, sizeof(b));
    int scales[kQK_K / kSub6];
    b.d = QuantizeSymmetricScales(xb, 4, 32, scales);
    for (int g = 0; g < kQK_K / kSub6; ++g) {
      const int s = scales[g] + 32;
      if (g < 8) {
        b.scales[g] |= static_cast<uint8_t>(s & 0x0F);
      } else {
        b.scales[g - 8] |= static_cast<uint8_t>((s & 0x0F) << 4);
      }
      b.scales[8 + g % 4] |= static_cast<uint8_t>((s >> 4) << (2 * (g / 4)));
    }
    uint8_t levels[kQK_K];
    SymmetricLevels(xb, Fp16ToFp32(b.d), scales, 4, levels);
    for (int v = 0; v < kQK_K; ++v) {
      const int h = v / 128, j = (v % 128) / 32, l = v % 32;
      b.qs[32 * h + l] |= static_cast<uint8_t>((levels[v] & 3) << (2 * j));
      b.hmask[l] |= static_cast<uint8_t>((levels[v] >> 2) << (4 * h + j));
    }
  }
}

void DequantizeRowQ3_K(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ3_K& b = x[i];
    const float d = Fp16ToFp32(b.d);
    for (int v = 0; v < kQK_K; ++v) {
      const int h = v / 128, j = (v % 128) / 32, l = v % 32;
      const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
      const int high = (b.hmask[l] >> (4 * h + j)) & 1;
      const float dl = d * (UnpackQ3KScale(b.scales, v / kSub6) - 32);
      y[i * kQK_K + v] = dl * ((low | (high << 2)) - 4);
    }
  }
}

// Q6_K per super-block:
//  1. Fit each sub-block of 16 symmetrically (FitSymmetric, -32..31).
//  2. d = s / -128 with s the fitted scale of largest magnitude (so that it
//     is stored as -128); int8 scales = round(a / d) clamped to 127.
//  3. Requantize each value with the stored scales to -32..31, kept + 32.
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float* xb = x + i * kQK_K;
    BlockQ6_K& b = y[i];
    std::memset(&b, 0, sizeof(b));
    int scales[kQK_K / kSub6];
    b.d = QuantizeSymmetricScales(xb, 32, 128, scales);
    for (int j = 0; j < kQK_K / kSub6; ++j) {
      b.scales[j] = static_cast<int8_t>(scales[j]);
    }
    uint8_t levels[kQK_K];
    SymmetricLevels(xb, Fp16ToFp32(b.d), scales, 32, levels);
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
