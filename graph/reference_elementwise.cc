// Reference kernels for elementwise ops: ADD, SUB, MUL, DIV (src1 broadcast
// to src0), SCALE, SQR, SQRT, LOG, UNARY and GLU. Work is split by
// destination rows; each row's inputs are read fully before it is written,
// so dst may alias src[0].

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "graph/reference_internal.h"
#include "graph/tensor.h"
#include "graph/type.h"

namespace tessera::reference_internal {
namespace {

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// evaluated as x / (1 + e^(-2u)) (the same value): for x below about -6,
// 1 + tanh(u) cancels to a few ulps of 1 and would keep only the first
// digit or two of a result near 1e-14.
double Gelu(double x) {
  constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;
  constexpr double kCoefA = 0.044715;
  const double u = kSqrt2OverPi * x * (1.0 + kCoefA * x * x);
  return x / (1.0 + std::exp(-2.0 * u));
}

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

double ApplyUnary(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kRelu:
      return x > 0.0 ? x : 0.0;
    case UnaryOp::kGelu:
      return Gelu(x);
    case UnaryOp::kSilu:
      return Silu(x);
    case UnaryOp::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::kTanh:
      return std::tanh(x);
    case UnaryOp::kExp:
      return std::exp(x);
  }
  return x;  // Unreachable: the op is checked before use.
}

}  // namespace

absl::Status ComputeBinary(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  if (node.IsEmpty()) return absl::OkStatus();

  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> x;
  std::vector<float> y;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    LoadRow(a, d.i1, d.i2, d.i3, x);
    LoadRow(b, d.i1 % b.ne[1], d.i2 % b.ne[2], d.i3 % b.ne[3], y);
    for (int64_t i0 = 0; i0 < node.ne[0]; ++i0) {
      const float v = y[i0 % b.ne[0]];
      switch (node.op) {
        case Op::kAdd:
          x[i0] += v;
          break;
        case Op::kSub:
          x[i0] -= v;
          break;
        case Op::kMul:
          x[i0] *= v;
          break;
        default:  // Op::kDiv; the dispatcher sends nothing else here.
          x[i0] /= v;
          break;
      }
    }
    StoreRow(node, d.i1, d.i2, d.i3, x.data());
  }
  return absl::OkStatus();
}

absl::Status ComputeUnaryLike(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const int32_t unary = node.op_params[0];
  if (node.IsEmpty()) return absl::OkStatus();

  const float scale = node.param<float>(0);
  const float bias = node.param<float>(1);
  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> x;
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    LoadRow(a, d.i1, d.i2, d.i3, x);
    for (float& v : x) {
      const double in = v;
      double out = in;
      switch (node.op) {
        case Op::kScale:
          out = in * scale + bias;
          break;
        case Op::kSqr:
          out = in * in;
          break;
        case Op::kSqrt:
          out = std::sqrt(in);
          break;
        case Op::kLog:
          out = std::log(in);
          break;
        default:  // Op::kUnary; the dispatcher sends nothing else here.
          out = ApplyUnary(static_cast<UnaryOp>(unary), in);
          break;
      }
      v = static_cast<float>(out);
    }
    StoreRow(node, d.i1, d.i2, d.i3, x.data());
  }
  return absl::OkStatus();
}

absl::Status ComputeGlu(Tensor& node, int ith, int nth) {
  const Tensor& a = *node.src[0];
  const Tensor* b = node.src[1];
  const int32_t glu = node.op_params[0];
  const int32_t swapped = node.op_params[1];
  if (node.IsEmpty()) return absl::OkStatus();

  const int64_t n = node.ne[0];
  const Range rows = PartRange(node.NumRows(), ith, nth);
  std::vector<float> x;
  std::vector<float> y;
  std::vector<float> out(n);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex d = RowAt(node, r);
    LoadRow(a, d.i1, d.i2, d.i3, x);
    const float* act_in = x.data();
    const float* gate = x.data() + n;
    if (b != nullptr) {
      LoadRow(*b, d.i1, d.i2, d.i3, y);
      gate = y.data();
    }
    if (swapped) std::swap(act_in, gate);
    for (int64_t i = 0; i < n; ++i) {
      const double v = act_in[i];
      const double act =
          static_cast<GluOp>(glu) == GluOp::kSwiGlu ? Silu(v) : Gelu(v);
      out[i] = static_cast<float>(act * gate[i]);
    }
    StoreRow(node, d.i1, d.i2, d.i3, out.data());
  }
  return absl::OkStatus();
}

}  // namespace tessera::reference_internal
