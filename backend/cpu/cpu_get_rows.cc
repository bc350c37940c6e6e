#include "backend/cpu/cpu_get_rows.h"

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/work_split.h"
#include "graph/type.h"

namespace tessera {
namespace {

bool RowsContiguous(const Tensor* t) {
  return t != nullptr && t->data != nullptr &&
         t->nb[0] == Traits(t->type).type_size;
}

// The index of result row (i1, i2, i3): b[i1, i2, i3].
int32_t IndexAt(const Tensor& b, int64_t i1, int64_t i2, int64_t i3) {
  int32_t index;
  std::memcpy(&index,
              static_cast<const char*>(b.data) + i1 * b.nb[0] + i2 * b.nb[1] +
                  i3 * b.nb[2],
              sizeof(index));
  return index;
}

// Row r of `t` as (i1, i2, i3).
struct RowOf {
  int64_t i1, i2, i3;
};
RowOf RowAt(const Tensor& t, int64_t r) {
  return {r % t.ne[1], (r / t.ne[1]) % t.ne[2], r / (t.ne[1] * t.ne[2])};
}

}  // namespace

bool TryGetRows(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  if (!RowsContiguous(&node) || !RowsContiguous(a) || b == nullptr ||
      b->data == nullptr || b->type != Type::kI32 || node.IsEmpty() ||
      node.ne[0] != a->ne[0] || node.ne[1] != b->ne[0] ||
      node.ne[2] != b->ne[1] || node.ne[3] != b->ne[2] ||
      a->ne[2] != node.ne[2] || a->ne[3] != node.ne[3] ||
      (node.type != Type::kF32 && node.type != a->type)) {
    return false;
  }
  const int64_t rows = node.NumRows();
  for (int64_t r = 0; r < rows; ++r) {
    const RowOf d = RowAt(node, r);
    const int32_t index = IndexAt(*b, d.i1, d.i2, d.i3);
    if (index < 0 || index >= a->ne[1]) return false;
  }
  const size_t row_bytes = a->RowBytes();
  const WorkRange mine = WorkPart(rows, ctx.ith, ctx.nth);
  for (int64_t r = mine.begin; r < mine.end; ++r) {
    const RowOf d = RowAt(node, r);
    const char* from = static_cast<const char*>(a->data) +
                       IndexAt(*b, d.i1, d.i2, d.i3) * a->nb[1] +
                       d.i2 * a->nb[2] + d.i3 * a->nb[3];
    char* to = static_cast<char*>(node.data) + d.i1 * node.nb[1] +
               d.i2 * node.nb[2] + d.i3 * node.nb[3];
    if (node.type == a->type) {
      std::memcpy(to, from, row_bytes);
    } else {
      RowToF32(*ctx.kernels, a->type, from, reinterpret_cast<float*>(to),
               node.ne[0]);
    }
  }
  return true;
}

}  // namespace tessera
