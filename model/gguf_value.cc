#include "model/gguf_value.h"

#include <type_traits>

namespace tessera {
namespace {

constexpr absl::string_view kNames[kGgufValueTypeCount] = {
    "uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
    "bool",  "string", "array",  "uint64", "int64",  "float64"};

constexpr size_t kSizes[kGgufValueTypeCount] = {1, 1, 2, 2, 4, 4, 4,
                                                1, 0, 0, 8, 8, 8};

// The order of the alternatives is the file format's order.
static_assert(
    std::is_same_v<std::variant_alternative_t<9, GgufValue>, GgufArray>);
static_assert(
    std::is_same_v<std::variant_alternative_t<12, GgufValue>, double>);
static_assert(std::variant_size_v<GgufValue> == kGgufValueTypeCount);
static_assert(std::variant_size_v<GgufArray> == kGgufValueTypeCount - 1);
static_assert(std::is_same_v<std::variant_alternative_t<8, GgufArray>,
                             std::vector<std::string>>);

}  // namespace

absl::string_view GgufValueTypeName(GgufValueType type) {
  const uint32_t i = static_cast<uint32_t>(type);
  return IsValidGgufValueType(i) ? kNames[i] : "invalid";
}

size_t GgufValueTypeSize(GgufValueType type) {
  const uint32_t i = static_cast<uint32_t>(type);
  return IsValidGgufValueType(i) ? kSizes[i] : 0;
}

size_t ArrayLength(const GgufArray& array) {
  return std::visit([](const auto& v) { return v.size(); }, array);
}

}  // namespace tessera
