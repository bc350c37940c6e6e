#include "backend/cpu/cpu_row_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/rope_angles.h"
#include "backend/cpu/work_split.h"
#include "graph/position_encoding.h"
#include "graph/type.h"

namespace tessera {
namespace {

// F32, rows contiguous, data present.
bool IsF32Rows(const Tensor* t) {
  return t != nullptr && t->type == Type::kF32 && t->nb[0] == sizeof(float) &&
         t->data != nullptr;
}

// dst and src[0] both F32 rows of the same, non-empty shape.
bool SameShapeF32(const Tensor& node) {
  const Tensor* a = node.src[0];
  return IsF32Rows(&node) && IsF32Rows(a) && !node.IsEmpty() &&
         SameShape(node, *a);
}

float* Row(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return reinterpret_cast<float*>(static_cast<char*>(t.data) + i1 * t.nb[1] +
                                  i2 * t.nb[2] + i3 * t.nb[3]);
}

// Calls fn(i1, i2, i3) for each row of this thread's part of `node`'s rows.
template <typename Fn>
void ForEachRow(const Tensor& node, const CpuComputeContext& ctx, Fn fn) {
  ForEachRowIn(WorkPart(node.NumRows(), ctx.ith, ctx.nth), node.ne[1],
               node.ne[2], fn);
}

BinaryKind KindOf(Op op) {
  switch (op) {
    case Op::kSub:
      return BinaryKind::kSub;
    case Op::kMul:
      return BinaryKind::kMul;
    case Op::kDiv:
      return BinaryKind::kDiv;
    default:
      return BinaryKind::kAdd;
  }
}

}  // namespace

bool TryBinary(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor* b = node.src[1];
  if (!SameShapeF32(node) || !IsF32Rows(b) || b->IsEmpty() ||
      b->ne[0] != node.ne[0] || !CanRepeat(*b, node)) {
    return false;
  }
  const Tensor& a = *node.src[0];
  const BinaryKind kind = KindOf(node.op);
  ForEachRow(node, ctx, [&](int64_t i1, int64_t i2, int64_t i3) {
    ctx.kernels->binary(
        kind, Row(a, i1, i2, i3),
        Row(*b, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]),
        Row(node, i1, i2, i3), node.ne[0]);
  });
  return true;
}

bool TryUnary(Tensor& node, const CpuComputeContext& ctx) {
  const auto op = static_cast<UnaryOp>(node.op_params[0]);
  if (!SameShapeF32(node) || (op != UnaryOp::kSilu && op != UnaryOp::kGelu)) {
    return false;
  }
  const Tensor& a = *node.src[0];
  const ActKind kind = op == UnaryOp::kSilu ? ActKind::kSilu : ActKind::kGelu;
  ForEachRow(node, ctx, [&](int64_t i1, int64_t i2, int64_t i3) {
    ctx.kernels->act(kind, Row(a, i1, i2, i3), nullptr, Row(node, i1, i2, i3),
                     node.ne[0]);
  });
  return true;
}

bool TryGlu(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  const auto op = static_cast<GluOp>(node.op_params[0]);
  if (!IsF32Rows(&node) || !IsF32Rows(a) || node.IsEmpty() ||
      (op != GluOp::kSwiGlu && op != GluOp::kGeGlu)) {
    return false;
  }
  const int64_t n = node.ne[0];
  if (b != nullptr ? !IsF32Rows(b) || !SameShape(*a, node) ||
                         !SameShape(*b, node)
                   : a->ne[0] != 2 * n || a->ne[1] != node.ne[1] ||
                         a->ne[2] != node.ne[2] || a->ne[3] != node.ne[3]) {
    return false;
  }
  const bool swapped = node.op_params[1] != 0;
  const ActKind kind = op == GluOp::kSwiGlu ? ActKind::kSilu : ActKind::kGelu;
  ForEachRow(node, ctx, [&](int64_t i1, int64_t i2, int64_t i3) {
    const float* x = Row(*a, i1, i2, i3);
    const float* g = b != nullptr ? Row(*b, i1, i2, i3) : x + n;
    if (swapped) std::swap(x, g);
    ctx.kernels->act(kind, x, g, Row(node, i1, i2, i3), n);
  });
  return true;
}

bool TryNorm(Tensor& node, const CpuComputeContext& ctx) {
  const float eps = node.param<float>(0);
  if (!SameShapeF32(node) || !(eps >= 0.0f)) return false;
  const Tensor& a = *node.src[0];
  const bool rms = node.op == Op::kRmsNorm;
  ForEachRow(node, ctx, [&](int64_t i1, int64_t i2, int64_t i3) {
    ctx.kernels->norm(Row(a, i1, i2, i3), Row(node, i1, i2, i3), node.ne[0],
                      eps, rms);
  });
  return true;
}

bool TrySoftMax(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor* mask = node.src[1];
  if (!SameShapeF32(node)) return false;
  if (mask != nullptr &&
      (!IsF32Rows(mask) || mask->ne[0] != node.ne[0] ||
       mask->ne[1] < node.ne[1] || mask->ne[2] <= 0 || mask->ne[3] <= 0 ||
       node.ne[2] % mask->ne[2] != 0 || node.ne[3] % mask->ne[3] != 0)) {
    return false;
  }
  const Tensor& a = *node.src[0];
  const float scale = node.param<float>(0);
  const float max_bias = node.param<float>(1);
  ForEachRow(node, ctx, [&](int64_t i1, int64_t i2, int64_t i3) {
    const float* m =
        mask == nullptr
            ? nullptr
            : Row(*mask, i1, i2 % mask->ne[2], i3 % mask->ne[3]);
    ctx.kernels->soft_max(Row(a, i1, i2, i3), m, Row(node, i1, i2, i3),
                          node.ne[0], scale,
                          AlibiSlope(max_bias, i2, node.ne[2]));
  });
  return true;
}

bool TryRope(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor* pos = node.src[1];
  const int32_t n_dims = node.op_params[1];
  const int32_t mode = node.op_params[2];
  if (!SameShapeF32(node) || pos == nullptr || pos->type != Type::kI32 ||
      pos->data == nullptr || pos->ne[0] != node.ne[2] || pos->ne[1] != 1 ||
      pos->ne[2] != 1 || pos->ne[3] != 1 || n_dims < 0 || n_dims % 2 != 0 ||
      n_dims > node.ne[0] || (mode != kRopeNormal && mode != kRopeNeox)) {
    return false;
  }
  // Frequency factors are read by RopeAngleCache.
  const Tensor* factors = node.src[2];
  if (factors != nullptr &&
      (factors->type != Type::kF32 || factors->data == nullptr ||
       factors->ne[0] < n_dims / 2)) {
    return false;
  }
  const Tensor& a = *node.src[0];
  RopeAngleCache angles(node);
  // This thread's rows in runs of one position (one i2, i3), a kernel call
  // per run: perf put about a third of ROPE [128,32,512]'s time in a call
  // and an angle look-up per row.
  const WorkRange mine = WorkPart(node.NumRows(), ctx.ith, ctx.nth);
  for (int64_t r = mine.begin; r < mine.end;) {
    const int64_t i1 = r % node.ne[1];
    const int64_t i2 = (r / node.ne[1]) % node.ne[2];
    const int64_t i3 = r / (node.ne[1] * node.ne[2]);
    const int64_t run = std::min(mine.end - r, node.ne[1] - i1);
    int32_t p;
    std::memcpy(&p, static_cast<const char*>(pos->data) + i2 * pos->nb[0],
                sizeof(p));
    angles.At(p);
    ctx.kernels->rope({.x = Row(a, i1, i2, i3),
                       .x_row_bytes = a.nb[1],
                       .dst = Row(node, i1, i2, i3),
                       .dst_row_bytes = node.nb[1],
                       .rows = run,
                       .n = node.ne[0],
                       .pairs = n_dims / 2,
                       .neox = mode == kRopeNeox,
                       .cos = angles.cos(),
                       .sin = angles.sin()});
    r += run;
  }
  return true;
}

}  // namespace tessera
