#include "model/ggml_type.h"

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

constexpr int64_t kQK_K = 256;

// A new tessera Type needs its ggml id in the two mappings below.
static_assert(kTypeCount == 15);

struct Entry {
  int32_t id;
  GgmlTypeLayout layout;
};

// From ggml.c's type_traits and the block structs of ggml-common.h.
constexpr Entry kLayouts[] = {
    {0, {"f32", 1, 4}},         {1, {"f16", 1, 2}},
    {2, {"q4_0", 32, 18}},       // fp16 d + 16 bytes
    {3, {"q4_1", 32, 20}},       // fp16 d, m + 16 bytes
    {6, {"q5_0", 32, 22}},       // fp16 d + 4 bytes qh + 16 bytes
    {7, {"q5_1", 32, 24}},       // fp16 d, m + 4 + 16
    {8, {"q8_0", 32, 34}},       // fp16 d + 32 bytes
    {9, {"q8_1", 32, 36}},       // fp16 d, s + 32 bytes
    {10, {"q2_K", kQK_K, 84}},   // 16 scales + 64 qs + fp16 d, dmin
    {11, {"q3_K", kQK_K, 110}},  // 32 hmask + 64 qs + 12 scales + fp16 d
    {12, {"q4_K", kQK_K, 144}},  // fp16 d, dmin + 12 scales + 128 qs
    {13, {"q5_K", kQK_K, 176}},  // fp16 d, dmin + 12 + 32 qh + 128 qs
    {14, {"q6_K", kQK_K, 210}},  // 128 ql + 64 qh + 16 scales + fp16 d
    {15, {"q8_K", kQK_K, 292}},  // float d + 256 qs + 16 int16 bsums
    {24, {"i8", 1, 1}},         {25, {"i16", 1, 2}},
    {26, {"i32", 1, 4}},        {27, {"i64", 1, 8}},
    {28, {"f64", 1, 8}},        {30, {"bf16", 1, 2}},
};

}  // namespace

const GgmlTypeLayout* FindGgmlTypeLayout(int32_t id) {
  for (const Entry& e : kLayouts) {
    if (e.id == id) return &e.layout;
  }
  return nullptr;
}

std::string GgmlTypeName(int32_t id) {
  if (const GgmlTypeLayout* layout = FindGgmlTypeLayout(id)) {
    return absl::StrCat(layout->name, " (", id, ")");
  }
  return absl::StrCat("ggml type ", id);
}

absl::StatusOr<std::optional<uint64_t>> GgmlNumBytes(
    int32_t id, absl::Span<const int64_t> ne) {
  int64_t elements = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ne[", i, "] = ", ne[i], " is negative"));
    }
    if (__builtin_mul_overflow(elements, ne[i], &elements)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the element count overflows int64 at ne[", i, "]"));
    }
  }
  const GgmlTypeLayout* layout = FindGgmlTypeLayout(id);
  if (layout == nullptr) return std::optional<uint64_t>();
  const int64_t row = ne.empty() ? 1 : ne[0];
  if (row % layout->block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ne[0] = ", row, " is not a multiple of the block size ",
                     layout->block_size, " of ", GgmlTypeName(id)));
  }
  // Every row holds whole blocks, so the element count does too.
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements / layout->block_size,
                             static_cast<int64_t>(layout->type_size), &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the byte size of ", elements, " values of ",
                     GgmlTypeName(id), " overflows int64"));
  }
  return std::optional<uint64_t>(static_cast<uint64_t>(bytes));
}

absl::StatusOr<Type> TesseraTypeFromGgml(int32_t id) {
  switch (id) {
    case kGgmlF32:
      return Type::kF32;
    case kGgmlF16:
      return Type::kF16;
    case kGgmlBF16:
      return Type::kBF16;
    case kGgmlI32:
      return Type::kI32;
    case kGgmlI64:
      return Type::kI64;
    case kGgmlQ8_0:
      return Type::kQ8_0;
    case kGgmlQ4_0:
      return Type::kQ4_0;
    case kGgmlQ4_1:
      return Type::kQ4_1;
    case kGgmlQ5_0:
      return Type::kQ5_0;
    case kGgmlQ5_1:
      return Type::kQ5_1;
    case kGgmlQ2_K:
      return Type::kQ2_K;
    case kGgmlQ3_K:
      return Type::kQ3_K;
    case kGgmlQ4_K:
      return Type::kQ4_K;
    case kGgmlQ5_K:
      return Type::kQ5_K;
    case kGgmlQ6_K:
      return Type::kQ6_K;
    default:
      return absl::UnimplementedError(
          absl::StrCat(GgmlTypeName(id), " has no tessera type"));
  }
}

int32_t GgmlTypeFromTessera(Type type) {
  switch (type) {
    case Type::kF32:
      return kGgmlF32;
    case Type::kF16:
      return kGgmlF16;
    case Type::kBF16:
      return kGgmlBF16;
    case Type::kI32:
      return kGgmlI32;
    case Type::kI64:
      return kGgmlI64;
    case Type::kQ8_0:
      return kGgmlQ8_0;
    case Type::kQ4_0:
      return kGgmlQ4_0;
    case Type::kQ4_1:
      return kGgmlQ4_1;
    case Type::kQ5_0:
      return kGgmlQ5_0;
    case Type::kQ5_1:
      return kGgmlQ5_1;
    case Type::kQ2_K:
      return kGgmlQ2_K;
    case Type::kQ3_K:
      return kGgmlQ3_K;
    case Type::kQ4_K:
      return kGgmlQ4_K;
    case Type::kQ5_K:
      return kGgmlQ5_K;
    case Type::kQ6_K:
      return kGgmlQ6_K;
  }
  return -1;  // Not a valid Type.
}

}  // namespace tessera
