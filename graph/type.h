#ifndef TESSERA_GRAPH_TYPE_H_
#define TESSERA_GRAPH_TYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

// Element types. The numeric values are part of the wire format.
enum class Type : int32_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kI32 = 3,
  kQ8_0 = 4,  // ggml block_q8_0: fp16 scale + 32 x int8 (34 bytes / 32 values)
  kQ4_0 = 5,  // ggml block_q4_0: fp16 scale + 16 bytes of nibbles (18 / 32)
  // ggml's K-quants, 256 values per super-block (graph/kquant.h):
  kQ4_K = 6,  // block_q4_K: 144 bytes / 256
  kQ5_K = 7,  // block_q5_K: 176 bytes / 256
  kQ6_K = 8,  // block_q6_K: 210 bytes / 256
  kI64 = 9,   // row ids (GET_ROWS, SET_ROWS), as llama.cpp sends them
  // ggml's other 32-value blocks (graph/block_quant.h):
  kQ4_1 = 10,  // block_q4_1: fp16 scale and minimum + 16 bytes (20 / 32)
  kQ5_0 = 11,  // block_q5_0: fp16 scale + 4 bytes of fifth bits + 16 (22)
  kQ5_1 = 12,  // block_q5_1: fp16 scale and minimum + 4 + 16 (24 / 32)
  // ggml's 2- and 3-bit K-quants (graph/kquant.h):
  kQ2_K = 13,  // block_q2_K: 84 bytes / 256
  kQ3_K = 14,  // block_q3_K: 110 bytes / 256
};
inline constexpr int kTypeCount = 15;

struct TypeTraits {
  std::string_view name;
  int64_t block_size;  // values per block; 1 for scalar types
  size_t type_size;    // bytes per block
  bool is_quantized;
};

// Whether `value` names a Type (for data from the wire).
bool IsValidType(int32_t value);
// Traits of a valid type.
const TypeTraits& Traits(Type type);
inline std::string_view TypeName(Type type) { return Traits(type).name; }
// The type whose TypeName is `name` ("f16", "q8_0", "q4_K", ...), if any.
std::optional<Type> TypeNamed(std::string_view name);
// Whether `type` is one of ggml's K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
inline bool IsKQuant(Type type) {
  return type == Type::kQ2_K || type == Type::kQ3_K || type == Type::kQ4_K ||
         type == Type::kQ5_K || type == Type::kQ6_K;
}
// Bytes of `n` values of `type`; `n` must be a multiple of the block size.
size_t RowSize(Type type, int64_t n);
// The alignment in bytes that kernels read a value (or block) of `type`
// with: the scalar's size; 2 for the blocks, whose widest member is an fp16
// scale.
size_t TypeAlignment(Type type);
// Whether values of `type` convert to and from float (everything but I32
// and I64 stored as float is lossy; they convert through static_cast).
inline bool IsFloatType(Type t) {
  return t == Type::kF32 || t == Type::kF16 || t == Type::kBF16;
}

// Scalar conversions (round to nearest even; NaN and infinity preserved).
uint16_t Fp32ToFp16(float f);
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToBf16(float f);
float Bf16ToFp32(uint16_t h);

inline constexpr int64_t kQK8_0 = 32;
inline constexpr int64_t kQK4_0 = 32;

// ggml's block layouts, byte for byte.
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;                // fp16 scale
  uint8_t qs[kQK4_0 / 2];    // value j in low nibble of qs[j], j+16 in high
};
static_assert(sizeof(BlockQ4_0) == 18);

// Quantize/dequantize `n` values (`n` a multiple of 32), as ggml's reference
// quantizers do: d = absmax / 127 (Q8_0), d = max / -8 with the signed
// maximum-magnitude value (Q4_0).
void QuantizeRowQ8_0(const float* x, BlockQ8_0* y, int64_t n);
void DequantizeRowQ8_0(const BlockQ8_0* x, float* y, int64_t n);
void QuantizeRowQ4_0(const float* x, BlockQ4_0* y, int64_t n);
void DequantizeRowQ4_0(const BlockQ4_0* x, float* y, int64_t n);

// Converts `n` contiguous values of `type` to float, or float to `type`
// (the K-quants through graph/kquant.h, Q4_1, Q5_0 and Q5_1 through
// graph/block_quant.h).
// For block types `n` must be a multiple of the block size.
void RowToFloat(Type type, const void* src, float* dst, int64_t n);
void RowFromFloat(Type type, const float* src, void* dst, int64_t n);

}  // namespace tessera

#endif  // TESSERA_GRAPH_TYPE_H_
