#include "backend/cpu/cpu_row_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/work_split.h"
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
  const WorkRange rows = WorkPart(node.NumRows(), ctx.ith, ctx.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const int64_t i1 = r % node.ne[1];
    const int64_t i2 = (r / node.ne[1]) % node.ne[2];
    const int64_t i3 = r / (node.ne[1] * node.ne[2]);
    fn(i1, i2, i3);
  }
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

// ALiBi slope of `head` of `n_head` (ggml's formula; 1 when max_bias <= 0),
// as the reference computes it.
float AlibiSlope(float max_bias, int64_t head, int64_t n_head) {
  if (!(max_bias > 0.0f)) return 1.0f;
  int64_t h = 1;
  while (h * 2 <= n_head) h *= 2;
  const float m0 = std::pow(2.0f, -max_bias / static_cast<float>(h));
  const float m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(h));
  return head < h ? std::pow(m0, static_cast<float>(head + 1))
                  : std::pow(m1, static_cast<float>(2 * (head - h) + 1));
}

// YaRN correction dimension (ggml's rope_yarn_corr_dim).
float YarnCorrDim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  constexpr float kPi = 3.14159265358979323846f;
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * kPi)) /
         (2.0f * std::log(base));
}

// cos and sin (scaled by mscale) of each rotated pair's angle at `pos`,
// ggml's rope_yarn as graph/reference_attention.cc computes it.
void RopeAngles(const Tensor& node, double pos, std::vector<float>& cos,
                std::vector<float>& sin) {
  const int n_dims = node.op_params[1];
  const int n_ctx_orig = node.op_params[4];
  const float freq_base = node.param<float>(5);
  const float freq_scale = node.param<float>(6);
  const float ext_factor = node.param<float>(7);
  const float attn_factor = node.param<float>(8);
  const float beta_fast = node.param<float>(9);
  const float beta_slow = node.param<float>(10);
  const float low = std::max(
      0.0f, std::floor(YarnCorrDim(n_dims, n_ctx_orig, beta_fast, freq_base)));
  const float high = std::min(
      static_cast<float>(n_dims - 1),
      std::ceil(YarnCorrDim(n_dims, n_ctx_orig, beta_slow, freq_base)));
  const int pairs = n_dims / 2;
  cos.resize(pairs);
  sin.resize(pairs);
  for (int i = 0; i < pairs; ++i) {
    const double theta_extrap =
        pos * std::pow(static_cast<double>(freq_base), -2.0 * i / n_dims);
    const double theta_interp = freq_scale * theta_extrap;
    double theta = theta_interp;
    double mscale = attn_factor;
    if (ext_factor != 0.0f) {
      const double y =
          (i - static_cast<double>(low)) / std::max(0.001f, high - low);
      const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * ext_factor;
      theta = theta_interp * (1.0 - ramp) + theta_extrap * ramp;
      mscale *= 1.0 + 0.1 * std::log(1.0 / freq_scale);
    }
    cos[i] = static_cast<float>(std::cos(theta) * mscale);
    sin[i] = static_cast<float>(std::sin(theta) * mscale);
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
  const Tensor& a = *node.src[0];
  std::vector<float> cos;
  std::vector<float> sin;
  int64_t angles_for = -1;
  ForEachRow(node, ctx, [&](int64_t i1, int64_t i2, int64_t i3) {
    if (i2 != angles_for) {
      int32_t p;
      std::memcpy(&p, static_cast<const char*>(pos->data) + i2 * pos->nb[0],
                  sizeof(p));
      RopeAngles(node, static_cast<double>(p), cos, sin);
      angles_for = i2;
    }
    ctx.kernels->rope(Row(a, i1, i2, i3), Row(node, i1, i2, i3), node.ne[0],
                      n_dims / 2, mode == kRopeNeox, cos.data(), sin.data());
  });
  return true;
}

}  // namespace tessera
