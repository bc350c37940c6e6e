#ifndef TESSERA_MODEL_GGML_TYPE_H_
#define TESSERA_MODEL_GGML_TYPE_H_

// ggml's tensor type ids as GGUF files store them (`enum ggml_type` of
// ggml.h), the block layouts this file knows, and the mapping to tessera's
// Type. Ids are kept as plain numbers: a file may name types that tessera
// (or this table) does not know.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/type.h"

namespace tessera {

// The ids of ggml's `enum ggml_type` that tessera names. The values are
// ggml's file format and never change.
inline constexpr int32_t kGgmlF32 = 0;
inline constexpr int32_t kGgmlF16 = 1;
inline constexpr int32_t kGgmlQ4_0 = 2;
inline constexpr int32_t kGgmlQ4_1 = 3;
inline constexpr int32_t kGgmlQ5_0 = 6;
inline constexpr int32_t kGgmlQ5_1 = 7;
inline constexpr int32_t kGgmlQ8_0 = 8;
inline constexpr int32_t kGgmlQ2_K = 10;
inline constexpr int32_t kGgmlQ3_K = 11;
inline constexpr int32_t kGgmlQ4_K = 12;
inline constexpr int32_t kGgmlQ5_K = 13;
inline constexpr int32_t kGgmlQ6_K = 14;
inline constexpr int32_t kGgmlI32 = 26;
inline constexpr int32_t kGgmlI64 = 27;
inline constexpr int32_t kGgmlBF16 = 30;

// The layout of a ggml type: `block_size` values take `type_size` bytes.
struct GgmlTypeLayout {
  absl::string_view name;  // ggml's type name ("q4_K")
  int64_t block_size;
  size_t type_size;
};

// The layout of ggml type `id`, or nullptr where this table does not know it
// (ids ggml never defined, ids it removed, and the IQ/TQ/FP4 families).
// Known: f32, f16, bf16, f64, i8, i16, i32, i64, q4_0, q4_1, q5_0, q5_1,
// q8_0, q8_1 and q2_K..q8_K.
const GgmlTypeLayout* FindGgmlTypeLayout(int32_t id);

// "q4_K (12)" for known ids, "ggml type 99" for the others.
std::string GgmlTypeName(int32_t id);

// The bytes of a dense tensor of ggml type `id` with `ne` values per
// dimension (ne[0] innermost). nullopt when the layout is unknown; errors
// INVALID_ARGUMENT when a dimension is negative, ne[0] is not a multiple of
// the block size, or the element count or byte size overflows int64.
absl::StatusOr<std::optional<uint64_t>> GgmlNumBytes(
    int32_t id, absl::Span<const int64_t> ne);

// tessera's Type for ggml type `id`. Errors: UNIMPLEMENTED "ggml type q4_K
// (12) has no tessera type" for ids tessera does not implement (known to
// ggml or not).
absl::StatusOr<Type> TesseraTypeFromGgml(int32_t id);

// ggml's id for a tessera Type (every Type has one; -1 for a value that is
// not a Type).
int32_t GgmlTypeFromTessera(Type type);

}  // namespace tessera

#endif  // TESSERA_MODEL_GGML_TYPE_H_
