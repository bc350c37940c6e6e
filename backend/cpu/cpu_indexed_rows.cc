#include "backend/cpu/cpu_indexed_rows.h"

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/work_split.h"
#include "graph/type.h"

namespace tessera {
namespace {

bool RowsContiguous(const Tensor* t) {
  return t != nullptr && t->data != nullptr && t->HasContiguousRows();
}

// The I32 or I64 index idx[i0, i1, i2].
int64_t IndexAt(const Tensor& idx, int64_t i0, int64_t i1, int64_t i2) {
  const char* at = static_cast<const char*>(idx.data) + i0 * idx.nb[0] +
                   i1 * idx.nb[1] + i2 * idx.nb[2];
  if (idx.type == Type::kI64) {
    int64_t index;
    std::memcpy(&index, at, sizeof(index));
    return index;
  }
  int32_t index;
  std::memcpy(&index, at, sizeof(index));
  return index;
}

char* RowPtr(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return static_cast<char*>(t.data) + i1 * t.nb[1] + i2 * t.nb[2] +
         i3 * t.nb[3];
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
    const int64_t index = IndexAt(*b, d.i1, d.i2, d.i3);
    if (index < 0 || index >= a->ne[1]) return false;
  }
  const size_t row_bytes = a->RowBytes();
  const WorkRange mine = WorkPart(rows, ctx.ith, ctx.nth);
  for (int64_t r = mine.begin; r < mine.end; ++r) {
    const RowOf d = RowAt(node, r);
    const char* from = RowPtr(*a, IndexAt(*b, d.i1, d.i2, d.i3), d.i2, d.i3);
    char* to = RowPtr(node, d.i1, d.i2, d.i3);
    if (node.type == a->type) {
      std::memmove(to, from, row_bytes);  // a graph may lay `to` over `from`
    } else {
      RowToF32(*ctx.kernels, a->type, from, reinterpret_cast<float*>(to),
               node.ne[0]);
    }
  }
  return true;
}

bool TrySetRows(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor* b = node.src[0];
  const Tensor* c = node.src[1];
  if (!RowsContiguous(&node) || !RowsContiguous(b) || c == nullptr ||
      c->data == nullptr || (c->type != Type::kI32 && c->type != Type::kI64) ||
      b->IsEmpty() || b->ne[0] != node.ne[0] || c->ne[0] != b->ne[1] ||
      c->ne[1] <= 0 || c->ne[2] <= 0 || b->ne[2] != node.ne[2] ||
      b->ne[3] != node.ne[3] ||
      (b->type != node.type && b->type != Type::kF32)) {
    return false;
  }
  const int64_t rows = b->NumRows();
  for (int64_t r = 0; r < rows; ++r) {
    const RowOf s = RowAt(*b, r);
    const int64_t index = IndexAt(*c, s.i1, s.i2 % c->ne[1], s.i3 % c->ne[2]);
    if (index < 0 || index >= node.ne[1]) return false;
  }
  const CpuKernels& k = *ctx.kernels;
  const int64_t n = b->ne[0];
  const WorkRange mine = WorkPart(rows, ctx.ith, ctx.nth);
  for (int64_t r = mine.begin; r < mine.end; ++r) {
    const RowOf s = RowAt(*b, r);
    const char* from = RowPtr(*b, s.i1, s.i2, s.i3);
    char* to = RowPtr(node, IndexAt(*c, s.i1, s.i2 % c->ne[1], s.i3 % c->ne[2]),
                      s.i2, s.i3);
    const float* x = reinterpret_cast<const float*>(from);
    if (b->type == node.type) {
      std::memmove(to, from, b->RowBytes());  // `to` may lie over `from`
    } else if (node.type == Type::kF16) {
      k.f32_to_f16(x, reinterpret_cast<uint16_t*>(to), n);
    } else if (node.type == Type::kBF16) {
      k.f32_to_bf16(x, reinterpret_cast<uint16_t*>(to), n);
    } else {
      RowFromFloat(node.type, x, to, n);
    }
  }
  return true;
}

}  // namespace tessera
