// Reference kernels that reduce or reorder whole rows: SUM_ROWS, MEAN,
// ARGMAX, NORM, RMS_NORM, ARGSORT, and MUL_MAT (dot products of rows).
// Work is split by destination rows; sums accumulate in double.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "graph/reference_internal.h"
#include "graph/tensor.h"
#include "graph/type.h"

namespace tessera::reference_internal {
namespace {

void StoreI32(int32_t v, void* p) { std::memcpy(p, &v, sizeof(v)); }

}  // namespace

absl::Status ComputeSumRows(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  if (node.IsEmpty()) return absl::OkStatus();

  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> x;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    LoadRow(a, d.i1, d.i2, d.i3, x);
    double sum = 0.0;
    for (float v : x) sum += v;
    if (node.op == Op::kMean) sum /= static_cast<double>(a.ne[0]);
    const float out = static_cast<float>(sum);
    StoreRow(node, d.i1, d.i2, d.i3, &out);
  }
  return absl::OkStatus();
}

absl::Status ComputeArgmax(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  if (node.IsEmpty()) return absl::OkStatus();

  // The last maximum, starting from -infinity: ties go to the later index
  // as in ggml's CPU backend; NaNs never win and a row of NaNs (or no
  // values) gives 0.
  const Range rows = PartRange(a.ne[1], ith, nth);
  std::vector<float> x;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    LoadRow(a, r, 0, 0, x);
    float best = -std::numeric_limits<float>::infinity();
    int32_t index = 0;
    for (int64_t i = 0; i < a.ne[0]; ++i) {
      if (x[i] >= best) {
        best = x[i];
        index = static_cast<int32_t>(i);
      }
    }
    StoreI32(index, ElementPtr(node, r, 0, 0, 0));
  }
  return absl::OkStatus();
}

absl::Status ComputeNorm(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const float eps = node.param<float>(0);
  if (node.IsEmpty()) return absl::OkStatus();

  const double n = static_cast<double>(a.ne[0]);
  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> x;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    LoadRow(a, d.i1, d.i2, d.i3, x);
    double mean = 0.0;
    if (node.op == Op::kNorm) {
      for (float v : x) mean += v;
      mean /= n;
    }
    // NORM: variance around the mean; RMS_NORM: mean of squares.
    double sum_sq = 0.0;
    for (float v : x) sum_sq += (v - mean) * (v - mean);
    const double inv = 1.0 / std::sqrt(sum_sq / n + eps);
    for (float& v : x) v = static_cast<float>((v - mean) * inv);
    StoreRow(node, d.i1, d.i2, d.i3, x.data());
  }
  return absl::OkStatus();
}

absl::Status ComputeArgsort(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const int32_t order = node.op_params[0];
  if (node.IsEmpty()) return absl::OkStatus();

  // Stable sort of indices; NaNs go last in either order so that the
  // comparison stays a strict weak ordering.
  const bool descending = order == static_cast<int32_t>(SortOrder::kDescending);
  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> x;
  std::vector<int32_t> idx(a.ne[0]);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    LoadRow(a, d.i1, d.i2, d.i3, x);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t i, int32_t j) {
      const float u = x[i];
      const float v = x[j];
      if (std::isnan(u)) return false;
      if (std::isnan(v)) return true;
      return descending ? u > v : u < v;
    });
    for (int64_t i0 = 0; i0 < a.ne[0]; ++i0) {
      StoreI32(idx[i0], ElementPtr(node, i0, d.i1, d.i2, d.i3));
    }
  }
  return absl::OkStatus();
}

absl::Status ComputeMulMat(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  if (node.IsEmpty()) return absl::OkStatus();

  const int64_t r2 = b.ne[2] / a.ne[2];
  const int64_t r3 = b.ne[3] / a.ne[3];
  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> x;
  std::vector<float> y;
  std::vector<float> out(node.ne[0]);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    LoadRow(b, d.i1, d.i2, d.i3, y);
    for (int64_t i = 0; i < a.ne[1]; ++i) {
      LoadRow(a, i, d.i2 / r2, d.i3 / r3, x);
      double dot = 0.0;
      for (int64_t k = 0; k < a.ne[0]; ++k) {
        dot += static_cast<double>(x[k]) * y[k];
      }
      out[i] = static_cast<float>(dot);
    }
    StoreRow(node, d.i1, d.i2, d.i3, out.data());
  }
  return absl::OkStatus();
}

}  // namespace tessera::reference_internal
