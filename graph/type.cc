#include "graph/type.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "graph/block_quant.h"
#include "graph/kquant.h"

namespace tessera {
namespace {

constexpr TypeTraits kTraits[kTypeCount] = {
    {"f32", 1, sizeof(float), false},
    {"f16", 1, sizeof(uint16_t), false},
    {"bf16", 1, sizeof(uint16_t), false},
    {"i32", 1, sizeof(int32_t), false},
    {"q8_0", kQK8_0, sizeof(BlockQ8_0), true},
    {"q4_0", kQK4_0, sizeof(BlockQ4_0), true},
    {"q4_K", kQK_K, sizeof(BlockQ4_K), true},
    {"q5_K", kQK_K, sizeof(BlockQ5_K), true},
    {"q6_K", kQK_K, sizeof(BlockQ6_K), true},
    {"i64", 1, sizeof(int64_t), false},
    {"q4_1", kQK5, sizeof(BlockQ4_1), true},
    {"q5_0", kQK5, sizeof(BlockQ5_0), true},
    {"q5_1", kQK5, sizeof(BlockQ5_1), true},
    {"q2_K", kQK_K, sizeof(BlockQ2_K), true},
    {"q3_K", kQK_K, sizeof(BlockQ3_K), true},
};

// Returned for out-of-range values so that describing a corrupt tensor never
// reads outside the table. block_size 1 keeps divisions by it safe.
constexpr TypeTraits kInvalidTraits = {"invalid", 1, 0, false};

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Shifts `m` right by `shift` (1..31) bits, rounding to nearest even.
uint32_t ShiftRoundEven(uint32_t m, int shift) {
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  uint32_t q = m >> shift;
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return q;
}

}  // namespace

bool IsValidType(int32_t value) { return value >= 0 && value < kTypeCount; }

const TypeTraits& Traits(Type type) {
  const int32_t i = static_cast<int32_t>(type);
  return IsValidType(i) ? kTraits[i] : kInvalidTraits;
}

std::optional<Type> TypeNamed(std::string_view name) {
  for (int32_t i = 0; i < kTypeCount; ++i) {
    if (kTraits[i].name == name) return static_cast<Type>(i);
  }
  return std::nullopt;
}

size_t TypeAlignment(Type type) {
  const TypeTraits& t = Traits(type);
  return t.block_size == 1 ? t.type_size : 2;
}

size_t RowSize(Type type, int64_t n) {
  const TypeTraits& t = Traits(type);
  return t.type_size * static_cast<size_t>(n / t.block_size);
}

// IEEE binary32 -> binary16. Normal results keep the top 10 mantissa bits
// rounded to nearest even (a carry into the exponent is the correct result,
// up to infinity); results below 2^-14 become subnormals counted in units of
// 2^-24; NaN stays a quiet NaN with the sign and top payload bits.
uint16_t Fp32ToFp16(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xffu);
  const uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) {
    if (mant == 0) return sign | 0x7c00u;
    return sign | 0x7e00u | static_cast<uint16_t>(mant >> 13);
  }
  const int32_t e = exp - 127;  // unbiased exponent
  if (e > 15) return sign | 0x7c00u;
  if (e >= -14) {
    // 5-bit exponent above the 23-bit mantissa; rounding off 13 bits may
    // carry into the exponent, which is the correctly rounded result.
    const uint32_t full = (static_cast<uint32_t>(e + 15) << 23) | mant;
    return sign | static_cast<uint16_t>(ShiftRoundEven(full, 13));
  }
  if (e < -25) return sign;  // below half the smallest subnormal
  // value = (mant | 2^23) * 2^(e - 23) = q * 2^-24 with q = m * 2^(e + 1).
  const uint32_t m = mant | 0x800000u;
  return sign | static_cast<uint16_t>(ShiftRoundEven(m, -(e + 1)));
}

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return BitsFloat(sign);
  // Subnormal: normalize so the leading one becomes the implicit bit.
  int32_t e = 113;  // biased exponent of 2^-14
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return BitsFloat(sign | (static_cast<uint32_t>(e) << 23) |
                   ((mant & 0x3ffu) << 13));
}

uint16_t Fp32ToBf16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  }
  // Rounding may carry into the exponent, up to infinity, as it should.
  return static_cast<uint16_t>(ShiftRoundEven(x & 0x7fffffffu, 16) |
                               ((x >> 16) & 0x8000u));
}

float Bf16ToFp32(uint16_t h) {
  return BitsFloat(static_cast<uint32_t>(h) << 16);
}

// Q8_0 per block of 32: d = max|x| / 127, q = round(x / d).
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK8_0;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQK8_0; ++j)
      amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    for (int64_t j = 0; j < kQK8_0; ++j) {
      // fmaxf/fminf keep the cast defined for non-finite input.
      const float q =
          std::fminf(std::fmaxf(std::round(xb[j] * id), -127.0f), 127.0f);
      y[i].qs[j] = static_cast<int8_t>(q);
    }
  }
}

void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t n) {
  const int64_t nb = n / kQK8_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int64_t j = 0; j < kQK8_0; ++j) y[i * kQK8_0 + j] = x[i].qs[j] * d;
  }
}

// Q4_0 per block of 32: m = the value of largest magnitude (with its sign),
// d = m / -8, q = min(15, trunc(x / d + 8.5)); value j goes to the low nibble
// of qs[j] and value j + 16 to its high nibble. Dequantized: (q - 8) * d.
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n) {
  const int64_t nb = n / kQK4_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK4_0;
    float amax = 0.0f;
    float max = 0.0f;
    for (int64_t j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = Fp32ToFp16(d);
    auto quant = [id](float v) {
      // Truncation of a value clamped to [0, 15] equals ggml's
      // min(15, (int8_t)(v * id + 8.5)) for finite input, and stays defined
      // otherwise.
      const float q = std::fminf(std::fmaxf(v * id + 8.5f, 0.0f), 15.0f);
      return static_cast<uint8_t>(q);
    };
    for (int64_t j = 0; j < kQK4_0 / 2; ++j) {
      y[i].qs[j] =
          static_cast<uint8_t>(quant(xb[j]) | (quant(xb[j + kQK4_0 / 2]) << 4));
    }
  }
}

void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t n) {
  const int64_t nb = n / kQK4_0;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = Fp16ToFp32(x[i].d);
    for (int64_t j = 0; j < kQK4_0 / 2; ++j) {
      y[i * kQK4_0 + j] = ((x[i].qs[j] & 0x0f) - 8) * d;
      y[i * kQK4_0 + j + kQK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void RowToFloat(Type type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case Type::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case Type::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(s[i]);
      return;
    }
    case Type::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(s[i]);
      return;
    }
    case Type::kI32: {
      const int32_t* s = static_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case Type::kI64: {
      const int64_t* s = static_cast<const int64_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case Type::kQ8_0:
      DequantizeRowQ8_0(static_cast<const BlockQ8_0*>(src), dst, n);
      return;
    case Type::kQ4_0:
      DequantizeRowQ4_0(static_cast<const BlockQ4_0*>(src), dst, n);
      return;
    case Type::kQ4_K:
      DequantizeRowQ4_K(static_cast<const BlockQ4_K*>(src), dst, n);
      return;
    case Type::kQ5_K:
      DequantizeRowQ5_K(static_cast<const BlockQ5_K*>(src), dst, n);
      return;
    case Type::kQ6_K:
      DequantizeRowQ6_K(static_cast<const BlockQ6_K*>(src), dst, n);
      return;
    case Type::kQ4_1:
      DequantizeRowQ4_1(static_cast<const BlockQ4_1*>(src), dst, n);
      return;
    case Type::kQ5_0:
      DequantizeRowQ5_0(static_cast<const BlockQ5_0*>(src), dst, n);
      return;
    case Type::kQ5_1:
      DequantizeRowQ5_1(static_cast<const BlockQ5_1*>(src), dst, n);
      return;
    case Type::kQ2_K:
      DequantizeRowQ2_K(static_cast<const BlockQ2_K*>(src), dst, n);
      return;
    case Type::kQ3_K:
      DequantizeRowQ3_K(static_cast<const BlockQ3_K*>(src), dst, n);
      return;
  }
}

void RowFromFloat(Type type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case Type::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case Type::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToFp16(src[i]);
      return;
    }
    case Type::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = Fp32ToBf16(src[i]);
      return;
    }
    case Type::kI32: {
      int32_t* d = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(src[i]);
      return;
    }
    case Type::kI64: {
      int64_t* d = static_cast<int64_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int64_t>(src[i]);
      return;
    }
    case Type::kQ8_0:
      QuantizeRowQ8_0(src, static_cast<BlockQ8_0*>(dst), n);
      return;
    case Type::kQ4_0:
      QuantizeRowQ4_0(src, static_cast<BlockQ4_0*>(dst), n);
      return;
    case Type::kQ4_K:
      QuantizeRowQ4_K(src, static_cast<BlockQ4_K*>(dst), n);
      return;
    case Type::kQ5_K:
      QuantizeRowQ5_K(src, static_cast<BlockQ5_K*>(dst), n);
      return;
    case Type::kQ6_K:
      QuantizeRowQ6_K(src, static_cast<BlockQ6_K*>(dst), n);
      return;
    case Type::kQ4_1:
      QuantizeRowQ4_1(src, static_cast<BlockQ4_1*>(dst), n);
      return;
    case Type::kQ5_0:
      QuantizeRowQ5_0(src, static_cast<BlockQ5_0*>(dst), n);
      return;
    case Type::kQ5_1:
      QuantizeRowQ5_1(src, static_cast<BlockQ5_1*>(dst), n);
      return;
    case Type::kQ2_K:
      QuantizeRowQ2_K(src, static_cast<BlockQ2_K*>(dst), n);
      return;
    case Type::kQ3_K:
      QuantizeRowQ3_K(src, static_cast<BlockQ3_K*>(dst), n);
      return;
  }
}

}  // namespace tessera
