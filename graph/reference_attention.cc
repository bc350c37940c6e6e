// Reference kernels of attention: SOFT_MAX, ROPE and FLASH_ATTN_EXT. Work is
// split by destination rows (FLASH_ATTN_EXT: one row per query and head).
// SOFT_MAX and ROPE read each row fully before writing it, so dst may alias
// src[0].

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "graph/position_encoding.h"
#include "graph/reference_internal.h"
#include "graph/tensor.h"
#include "graph/type.h"

namespace tessera::reference_internal {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace

absl::Status ComputeSoftMax(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor* mask = node.src[1];
  if (node.IsEmpty()) return absl::OkStatus();

  const float scale = node.param<float>(0);
  const float max_bias = node.param<float>(1);
  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> x;
  std::vector<float> m;
  std::vector<double> w(a.ne[0]);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    LoadRow(a, d.i1, d.i2, d.i3, x);
    const float slope = AlibiSlope(max_bias, d.i2, a.ne[2]);
    if (mask != nullptr) {
      LoadRow(*mask, d.i1, d.i2 % mask->ne[2], d.i3 % mask->ne[3], m);
    }
    double max = kNegInf;
    for (int64_t i = 0; i < a.ne[0]; ++i) {
      w[i] = static_cast<double>(x[i]) * scale;
      if (mask != nullptr) w[i] += static_cast<double>(slope) * m[i];
      max = std::max(max, w[i]);
    }
    double sum = 0.0;
    for (int64_t i = 0; i < a.ne[0]; ++i) {
      w[i] = std::exp(w[i] - max);
      sum += w[i];
    }
    for (int64_t i = 0; i < a.ne[0]; ++i) {
      x[i] = static_cast<float>(w[i] / sum);
    }
    StoreRow(node, d.i1, d.i2, d.i3, x.data());
  }
  return absl::OkStatus();
}

absl::Status ComputeRope(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor& pos = *node.src[1];
  const int32_t n_dims = node.op_params[1];
  const int32_t mode = node.op_params[2];
  if (node.IsEmpty()) return absl::OkStatus();

  // Normal mode rotates pairs (2i, 2i + 1), NeoX pairs (i, i + n_dims / 2);
  // values past n_dims are copied.
  const int64_t half = n_dims / 2;
  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> x;
  RopeAngles angles;
  int64_t angles_for = -1;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    if (d.i2 != angles_for) {
      int32_t p;
      std::memcpy(&p, ElementPtr(pos, d.i2, 0, 0, 0), sizeof(p));
      ComputeRopeAngles(node, static_cast<double>(p), angles);
      angles_for = d.i2;
    }
    LoadRow(a, d.i1, d.i2, d.i3, x);
    for (int64_t i = 0; i < half; ++i) {
      const int64_t j0 = mode == kRopeNeox ? i : 2 * i;
      const int64_t j1 = mode == kRopeNeox ? i + half : 2 * i + 1;
      const double x0 = x[j0];
      const double x1 = x[j1];
      x[j0] = static_cast<float>(x0 * angles.cos[i] - x1 * angles.sin[i]);
      x[j1] = static_cast<float>(x0 * angles.sin[i] + x1 * angles.cos[i]);
    }
    StoreRow(node, d.i1, d.i2, d.i3, x.data());
  }
  return absl::OkStatus();
}

absl::Status ComputeFlashAttnExt(Tensor& node, int ith, int nth) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const Tensor* mask = node.src[3];
  if (node.IsEmpty()) return absl::OkStatus();

  const float scale = node.param<float>(0);
  const float max_bias = node.param<float>(1);
  const float softcap = node.param<float>(2);
  const int64_t n_kv = k.ne[1];
  const int64_t group2 = q.ne[2] / k.ne[2];
  const int64_t group3 = q.ne[3] / k.ne[3];

  // Per (head, query, batch): scores s_j = scale q.k_j, softcapped to
  // softcap tanh(s_j / softcap), plus slope * mask_j; -inf scores weigh 0;
  // out = sum_j exp(s_j - max) v_j / sum_j exp(s_j - max), or 0 when every
  // score is -inf.
  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> qr;
  std::vector<float> kr;
  std::vector<float> vr;
  std::vector<float> m;
  std::vector<double> s(n_kv);
  std::vector<double> acc(v.ne[0]);
  std::vector<float> out(v.ne[0]);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    const int64_t head = d.i1;
    const int64_t iq = d.i2;
    const int64_t batch = d.i3;
    const int64_t kh = head / group2;
    const int64_t kb = batch / group3;
    LoadRow(q, iq, head, batch, qr);
    const float slope = AlibiSlope(max_bias, head, q.ne[2]);
    if (mask != nullptr) {
      LoadRow(*mask, iq, head % mask->ne[2], batch % mask->ne[3], m);
    }
    double max = kNegInf;
    for (int64_t j = 0; j < n_kv; ++j) {
      const double mv =
          mask != nullptr ? static_cast<double>(slope) * m[j] : 0.0;
      if (mv == kNegInf) {
        s[j] = kNegInf;
        continue;
      }
      LoadRow(k, j, kh, kb, kr);
      double dot = 0.0;
      for (int64_t i = 0; i < q.ne[0]; ++i) {
        dot += static_cast<double>(qr[i]) * kr[i];
      }
      double score = dot * scale;
      if (softcap != 0.0f) score = softcap * std::tanh(score / softcap);
      s[j] = score + mv;
      max = std::max(max, s[j]);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    double sum = 0.0;
    if (max != kNegInf) {
      for (int64_t j = 0; j < n_kv; ++j) {
        if (s[j] == kNegInf) continue;
        const double w = std::exp(s[j] - max);
        sum += w;
        LoadRow(v, j, kh, kb, vr);
        for (int64_t i = 0; i < v.ne[0]; ++i) acc[i] += w * vr[i];
      }
    }
    for (int64_t i = 0; i < v.ne[0]; ++i) {
      out[i] = sum > 0.0 ? static_cast<float>(acc[i] / sum) : 0.0f;
    }
    StoreRow(node, head, iq, batch, out.data());
  }
  return absl::OkStatus();
}

}  // namespace tessera::reference_internal
