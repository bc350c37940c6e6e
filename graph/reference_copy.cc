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
  const Tensor& src = *node.src[0];
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
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
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
  const Tensor& b = *node.src[0];
  const Tensor& c = *node.src[1];
  if (b.IsEmpty()) return absl::OkStatus();

  const Range rows = PartRange(b.NumRows(), ith, nth);
  std::vector<float> row;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex s = RowAt(b, r);
    const int64_t c1 = s.i2 % c.ne[1];
    const int64_t c2 = s.i3 % c.ne[2];
    const void* at = ElementPtr(c, s.i1, c1, c2, 0);
    int64_t index = 0;
    if (c.type == Type::kI64) {
      std::memcpy(&index, at, sizeof(index));
    } else {
      index = LoadI32(at);
    }
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
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int32_t dim = node.op_params[0];
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
