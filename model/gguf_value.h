#ifndef TESSERA_MODEL_GGUF_VALUE_H_
#define TESSERA_MODEL_GGUF_VALUE_H_

// The metadata values of a GGUF file (ggml's `enum gguf_type`): twelve
// scalar types, strings, and arrays of any one of those (arrays do not nest).
// Shared by the reader and the writer.

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"

namespace tessera {

// The numeric values are GGUF's file format.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,    // one byte; the reader takes any non-zero byte as true
  kString = 8,  // uint64 length + bytes, no terminator
  kArray = 9,   // uint32 element type + uint64 count + elements
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
inline constexpr uint32_t kGgufValueTypeCount = 13;

// Whether `value` names a GgufValueType (for data from files).
inline bool IsValidGgufValueType(uint32_t value) {
  return value < kGgufValueTypeCount;
}
// "uint32", "string", "array", ...; "invalid" for other values.
absl::string_view GgufValueTypeName(GgufValueType type);
// Bytes of one value of a fixed-size type; 0 for kString, kArray and
// values that are not a type.
size_t GgufValueTypeSize(GgufValueType type);

// An array: a vector of one element type. The alternatives are in the order
// of GgufValueType with kArray left out.
using GgufArray = std::variant<
    std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>,
    std::vector<int16_t>, std::vector<uint32_t>, std::vector<int32_t>,
    std::vector<float>, std::vector<bool>, std::vector<std::string>,
    std::vector<uint64_t>, std::vector<int64_t>, std::vector<double>>;

// A value. Alternative i holds GgufValueType i, so construct with the exact
// C++ type: GgufValue(uint32_t{7}), GgufValue(std::string("llama")),
// GgufValue(GgufArray(std::vector<float>{...})).
using GgufValue =
    std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float,
                 bool, std::string, GgufArray, uint64_t, int64_t, double>;

// The type of a value, and the element type and length of an array.
inline GgufValueType TypeOf(const GgufValue& value) {
  return static_cast<GgufValueType>(value.index());
}
inline GgufValueType ElementTypeOf(const GgufArray& array) {
  const size_t i = array.index();
  return static_cast<GgufValueType>(i < 9 ? i : i + 1);
}
size_t ArrayLength(const GgufArray& array);

// The GgufValueType of a C++ scalar type: GgufTypeOf<float>::value is
// kFloat32. Defined for the thirteen alternatives of GgufValue.
template <typename T>
struct GgufTypeOf;
template <>
struct GgufTypeOf<uint8_t> {
  static constexpr GgufValueType value = GgufValueType::kUint8;
};
template <>
struct GgufTypeOf<int8_t> {
  static constexpr GgufValueType value = GgufValueType::kInt8;
};
template <>
struct GgufTypeOf<uint16_t> {
  static constexpr GgufValueType value = GgufValueType::kUint16;
};
template <>
struct GgufTypeOf<int16_t> {
  static constexpr GgufValueType value = GgufValueType::kInt16;
};
template <>
struct GgufTypeOf<uint32_t> {
  static constexpr GgufValueType value = GgufValueType::kUint32;
};
template <>
struct GgufTypeOf<int32_t> {
  static constexpr GgufValueType value = GgufValueType::kInt32;
};
template <>
struct GgufTypeOf<float> {
  static constexpr GgufValueType value = GgufValueType::kFloat32;
};
template <>
struct GgufTypeOf<bool> {
  static constexpr GgufValueType value = GgufValueType::kBool;
};
template <>
struct GgufTypeOf<std::string> {
  static constexpr GgufValueType value = GgufValueType::kString;
};
template <>
struct GgufTypeOf<GgufArray> {
  static constexpr GgufValueType value = GgufValueType::kArray;
};
template <>
struct GgufTypeOf<uint64_t> {
  static constexpr GgufValueType value = GgufValueType::kUint64;
};
template <>
struct GgufTypeOf<int64_t> {
  static constexpr GgufValueType value = GgufValueType::kInt64;
};
template <>
struct GgufTypeOf<double> {
  static constexpr GgufValueType value = GgufValueType::kFloat64;
};

}  // namespace tessera

#endif  // TESSERA_MODEL_GGUF_VALUE_H_
