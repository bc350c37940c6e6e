#include "graph/tensor.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {
namespace {

constexpr std::string_view kOpNames[kOpCount] = {
    "NONE",
    "DUP",
    "CPY",
    "CONT",
    "ADD",
    "SUB",
    "MUL",
    "DIV",
    "SCALE",
    "SQR",
    "SQRT",
    "LOG",
    "SUM_ROWS",
    "MEAN",
    "ARGMAX",
    "UNARY",
    "GLU",
    "NORM",
    "RMS_NORM",
    "MUL_MAT",
    "GET_ROWS",
    "SET_ROWS",
    "VIEW",
    "RESHAPE",
    "PERMUTE",
    "TRANSPOSE",
    "SOFT_MAX",
    "ROPE",
    "CONCAT",
    "ARGSORT",
    "FLASH_ATTN_EXT",
};

constexpr std::string_view kUnaryOpNames[kUnaryOpCount] = {
    "NEG", "RELU", "GELU", "SILU", "SIGMOID", "TANH", "EXP",
};

constexpr std::string_view kGluOpNames[kGluOpCount] = {"SWIGLU", "GEGLU"};

}  // namespace

std::string_view OpName(Op op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kOpCount ? kOpNames[i] : "INVALID_OP";
}

std::string_view UnaryOpName(UnaryOp op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kUnaryOpCount ? kUnaryOpNames[i] : "INVALID_UNARY_OP";
}

std::string_view GluOpName(GluOp op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kGluOpCount ? kGluOpNames[i] : "INVALID_GLU_OP";
}

// ggml_nbytes: the first element's block plus (ne[i] - 1) strides per
// dimension, where dimension 0 counts in blocks.
size_t Tensor::NumBytes() const {
  for (int i = 0; i < kMaxDims; ++i) {
    if (ne[i] <= 0) return 0;
  }
  const TypeTraits& t = Traits(type);
  size_t bytes;
  if (t.block_size == 1) {
    bytes = t.type_size;
    for (int i = 0; i < kMaxDims; ++i) {
      bytes += static_cast<size_t>(ne[i] - 1) * nb[i];
    }
  } else {
    bytes = static_cast<size_t>(ne[0]) * nb[0] / t.block_size;
    for (int i = 1; i < kMaxDims; ++i) {
      bytes += static_cast<size_t>(ne[i] - 1) * nb[i];
    }
  }
  return bytes;
}

std::optional<size_t> CheckedNumBytes(const Tensor& t) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] <= 0) return 0;
  }
  const TypeTraits& traits = Traits(t.type);
  uint64_t total = traits.type_size;
  int first = 0;
  if (traits.block_size != 1) {
    if (__builtin_mul_overflow(
            static_cast<uint64_t>(t.ne[0] / traits.block_size),
            static_cast<uint64_t>(t.nb[0]), &total)) {
      return std::nullopt;
    }
    first = 1;
  }
  for (int i = first; i < kMaxDims; ++i) {
    uint64_t span;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[i] - 1),
                               static_cast<uint64_t>(t.nb[i]), &span) ||
        __builtin_add_overflow(total, span, &total)) {
      return std::nullopt;
    }
  }
  if (total > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return std::nullopt;
  }
  return static_cast<size_t>(total);
}

// ggml_is_contiguous: dimensions of size 1 may have any stride.
bool Tensor::IsContiguous() const {
  const TypeTraits& t = Traits(type);
  size_t next = t.type_size;
  if (ne[0] != t.block_size && nb[0] != next) return false;
  next *= static_cast<size_t>(ne[0] / t.block_size);
  for (int i = 1; i < kMaxDims; ++i) {
    if (ne[i] != 1) {
      if (nb[i] != next) return false;
      next *= static_cast<size_t>(ne[i]);
    }
  }
  return true;
}

bool Tensor::HasContiguousRows() const {
  const TypeTraits& t = Traits(type);
  return ne[0] == t.block_size || nb[0] == t.type_size;
}

void ContiguousStrides(Type type, const int64_t ne[kMaxDims],
                       size_t nb[kMaxDims]) {
  const TypeTraits& t = Traits(type);
  nb[0] = t.type_size;
  nb[1] = nb[0] * static_cast<size_t>(ne[0] / t.block_size);
  for (int i = 2; i < kMaxDims; ++i) {
    nb[i] = nb[i - 1] * static_cast<size_t>(ne[i - 1]);
  }
}

bool SameShape(const Tensor& a, const Tensor& b) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (a.ne[i] != b.ne[i]) return false;
  }
  return true;
}

// ggml_can_repeat: an empty `b` only repeats to an empty `a`. Negative
// dimensions (corrupt data) never repeat.
bool CanRepeat(const Tensor& b, const Tensor& a) {
  if (b.IsEmpty()) return a.IsEmpty();
  for (int i = 0; i < kMaxDims; ++i) {
    if (b.ne[i] <= 0 || a.ne[i] % b.ne[i] != 0) return false;
  }
  return true;
}

std::string Describe(const Tensor& t) {
  return absl::StrCat(t.name.empty() ? "(unnamed)" : t.name, " ",
                      std::string(TypeName(t.type)), " [",
                      absl::StrJoin(t.ne, ", "), "]");
}

}  // namespace tessera
