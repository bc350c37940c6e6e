// Reference kernels that move values: DUP, CPY, CONT, GET_ROWS, SET_ROWS,
// CONCAT. Work is split by destination rows (SET_ROWS: by source rows).

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "graph/reference_internal.h"
#include "graph/tensor.h"
#include "graph/type.h"

namespace tessera::reference_internal {
namespace {

// Reads the values of a tensor in row-major (flat) order as floats; a
// quantized row is dequantized once and kept while reads stay in it.
class FlatReader {
 public:
  explicit FlatReader(const Tensor& t)
      : t_(t), quantized_(Traits(t.type).is_quantized) {}

  float At(int64_t flat) {
    const int64_t i0 = flat % t_.ne[0];
    const int64_t r = flat / t_.ne[0];
    const RowIndex idx = RowAt(t_, r);
    if (!quantized_) {
      return LoadScalar(t_.type, ElementPtr(t_, i0, idx.i1, idx.i2, idx.i3));
    }
    if (r != cached_row_) {
      LoadRow(t_, idx.i1, idx.i2, idx.i3, row_);
      cached_row_ = r;
    }
    return row_[i0];
  }

 private:
  const Tensor& t_;
  const bool quantized_;
  int64_t cached_row_ = -1;
  std::vector<float> row_;
};

// Copies the rows `rows` of `dst` from `src` of the same type, block by
// block in flat order (bit-exact, also for quantized types).
void CopyBlocks(const Tensor& src, const Tensor& dst, Range rows) {
  const TypeTraits& traits = Traits(dst.type);
  const int64_t bs = traits.block_size;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(dst, r);
    for (int64_t j = 0; j < dst.ne[0] / bs; ++j) {
      const int64_t flat = r * dst.ne[0] + j * bs;
      const int64_t s0 = flat % src.ne[0];
      const RowIndex s = RowAt(src, flat / src.ne[0]);
      std::memcpy(ElementPtr(dst, j, d.i1, d.i2, d.i3),
                  ElementPtr(src, s0 / bs, s.i1, s.i2, s.i3), traits.type_size);
    }
  }
}

// Converts the rows `rows` of `dst` from `src` in flat order through float.
void ConvertRows(const Tensor& src, const Tensor& dst, Range rows) {
  FlatReader reader(src);
  std::vector<float> row(dst.ne[0]);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    for (int64_t i0 = 0; i0 < dst.ne[0]; ++i0) {
      row[i0] = reader.At(r * dst.ne[0] + i0);
    }
    const RowIndex d = RowAt(dst, r);
    StoreRow(dst, d.i1, d.i2, d.i3, row.data());
  }
}

int32_t LoadI32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

absl::Status ComputeCopy(Tensor& node, int ith, int nth) {
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, &node, "dst"));
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, node.src[0], "src"));
  const Tensor& src = *node.src[0];
  if (node.op != Op::kCpy && src.type != node.type) {
    return Invalid(node, "dst ", Describe(node), " must have the type of src ",
                   Describe(src));
  }
  if (Traits(src.type).is_quantized && src.type != node.type &&
      node.type != Type::kF32) {
    return Invalid(node, "quantized src ", Describe(src),
                   " converts only to f32, not to ", Describe(node));
  }
  if (src.NumElements() != node.NumElements()) {
    return Invalid(node, "src ", Describe(src), " and dst ", Describe(node),
                   " differ in element count");
  }
  if (node.IsEmpty()) return absl::OkStatus();

  const Range rows = PartRange(node.NumRows(), ith, nth);
  if (src.type == node.type) {
    CopyBlocks(src, node, rows);
  } else {
    ConvertRows(src, node, rows);
  }
  return absl::OkStatus();
}

absl::Status ComputeGetRows(Tensor& node, int ith, int nth) {
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, &node, "dst"));
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, node.src[0], "a"));
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, node.src[1], "b"));
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  TESSERA_RETURN_IF_ERROR(CheckType(node, b, "b", Type::kI32));
  const Type want = a.type == Type::kI32 ? Type::kI32 : Type::kF32;
  TESSERA_RETURN_IF_ERROR(CheckType(node, node, "dst", want));
  if (b.ne[3] != 1 || b.ne[1] != a.ne[2] || b.ne[2] != a.ne[3]) {
    return Invalid(node, "b ", Describe(b), " must be [n, ", a.ne[2], ", ",
                   a.ne[3], ", 1] for a ", Describe(a));
  }
  const int64_t ne[kMaxDims] = {a.ne[0], b.ne[0], b.ne[1], b.ne[2]};
  TESSERA_RETURN_IF_ERROR(CheckShape(node, node, "dst", ne));
  if (node.IsEmpty()) return absl::OkStatus();

  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> row;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    const int32_t index = LoadI32(ElementPtr(b, d.i1, d.i2, d.i3, 0));
    if (index < 0 || index >= a.ne[1]) {
      return Invalid(node, "row index ", index, " at b[", d.i1, ", ", d.i2,
                     ", ", d.i3, "] is out of range [0, ", a.ne[1], ")");
    }
    if (a.type == node.type) {
      const size_t size = Traits(a.type).type_size;
      for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) {
        std::memcpy(ElementPtr(node, i0, d.i1, d.i2, d.i3),
                    ElementPtr(a, i0, index, d.i2, d.i3), size);
      }
    } else {
      LoadRow(a, index, d.i2, d.i3, row);
      StoreRow(node, d.i1, d.i2, d.i3, row.data());
    }
  }
  return absl::OkStatus();
}

absl::Status ComputeSetRows(Tensor& node, int ith, int nth) {
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, &node, "dst"));
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, node.src[0], "b"));
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, node.src[1], "c"));
  const Tensor& b = *node.src[0];
  const Tensor& c = *node.src[1];
  TESSERA_RETURN_IF_ERROR(CheckType(node, b, "b", Type::kF32));
  TESSERA_RETURN_IF_ERROR(CheckType(node, c, "c", Type::kI32));
  if (node.type == Type::kI32) {
    return Invalid(node, "dst ", Describe(node),
                   " must be f32, f16, bf16, q8_0 or q4_0");
  }
  if (node.ne[0] != b.ne[0] || node.ne[2] != b.ne[2] || node.ne[3] != b.ne[3]) {
    return Invalid(node, "b ", Describe(b), " does not fit rows of dst ",
                   Describe(node));
  }
  if (c.ne[0] != b.ne[1] || c.ne[3] != 1 || c.ne[1] <= 0 || c.ne[2] <= 0 ||
      b.ne[2] % c.ne[1] != 0 || b.ne[3] % c.ne[2] != 0) {
    return Invalid(node, "c ", Describe(c), " does not index the rows of b ",
                   Describe(b));
  }
  if (b.IsEmpty()) return absl::OkStatus();

  const Range rows = PartRange(b.NumRows(), ith, nth);
  std::vector<float> row;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex s = RowAt(b, r);
    const int64_t c1 = s.i2 % c.ne[1];
    const int64_t c2 = s.i3 % c.ne[2];
    const int32_t index = LoadI32(ElementPtr(c, s.i1, c1, c2, 0));
    if (index < 0 || index >= node.ne[1]) {
      return Invalid(node, "row index ", index, " at c[", s.i1, ", ", c1, ", ",
                     c2, "] is out of range [0, ", node.ne[1], ")");
    }
    LoadRow(b, s.i1, s.i2, s.i3, row);
    StoreRow(node, index, s.i2, s.i3, row.data());
  }
  return absl::OkStatus();
}

absl::Status ComputeConcat(Tensor& node, int ith, int nth) {
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, &node, "dst"));
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, node.src[0], "a"));
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, node.src[1], "b"));
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  if (Traits(a.type).is_quantized) {
    return Invalid(node, "a ", Describe(a), " must not be quantized");
  }
  TESSERA_RETURN_IF_ERROR(CheckType(node, b, "b", a.type));
  TESSERA_RETURN_IF_ERROR(CheckType(node, node, "dst", a.type));
  const int32_t dim = node.op_params[0];
  if (dim < 0 || dim >= kMaxDims) {
    return Invalid(node, "dim ", dim, " is not in [0, 4)");
  }
  int64_t ne[kMaxDims];
  for (int i = 0; i < kMaxDims; ++i) {
    if (i != dim && a.ne[i] != b.ne[i]) {
      return Invalid(node, "a ", Describe(a), " and b ", Describe(b),
                     " differ in dimension ", i);
    }
    ne[i] = i == dim ? a.ne[i] + b.ne[i] : a.ne[i];
  }
  TESSERA_RETURN_IF_ERROR(CheckShape(node, node, "dst", ne));
  if (node.IsEmpty()) return absl::OkStatus();

  const size_t size = Traits(a.type).type_size;
  const Range rows = PartRange(node.NumRows(), ith, nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    for (int64_t i0 = 0; i0 < node.ne[0]; ++i0) {
      int64_t idx[kMaxDims] = {i0, d.i1, d.i2, d.i3};
      const Tensor* from = &a;
      if (idx[dim] >= a.ne[dim]) {
        idx[dim] -= a.ne[dim];
        from = &b;
      }
      std::memcpy(ElementPtr(node, i0, d.i1, d.i2, d.i3),
                  ElementPtr(*from, idx[0], idx[1], idx[2], idx[3]), size);
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::reference_internal
