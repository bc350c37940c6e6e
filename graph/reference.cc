#include "graph/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/graph.h"
#include "graph/node_checks.h"
#include "graph/reference_internal.h"
#include "graph/tensor.h"
#include "graph/type.h"

namespace tessera {
namespace reference_internal {

Range PartRange(int64_t n, int ith, int nth) {
  const int64_t per = (n + nth - 1) / nth;
  const int64_t begin = std::min(n, per * ith);
  return {begin, std::min(n, begin + per)};
}

RowIndex RowAt(const Tensor& t, int64_t r) {
  RowIndex idx;
  idx.i1 = r % t.ne[1];
  r /= t.ne[1];
  idx.i2 = r % t.ne[2];
  idx.i3 = r / t.ne[2];
  return idx;
}

float LoadScalar(Type type, const void* p) {
  switch (type) {
    case Type::kF32: {
      float v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    }
    case Type::kF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof(h));
      return Fp16ToFp32(h);
    }
    case Type::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof(h));
      return Bf16ToFp32(h);
    }
    case Type::kI32: {
      int32_t v;
      std::memcpy(&v, p, sizeof(v));
      return static_cast<float>(v);
    }
    case Type::kI64: {
      int64_t v;
      std::memcpy(&v, p, sizeof(v));
      return static_cast<float>(v);
    }
    case Type::kQ8_0:
    case Type::kQ4_0:
    case Type::kQ4_1:
    case Type::kQ5_0:
    case Type::kQ5_1:
    case Type::kQ2_K:
    case Type::kQ3_K:
    case Type::kQ4_K:
    case Type::kQ5_K:
    case Type::kQ6_K:
      break;
  }
  return 0.0f;  // Quantized types never reach here (rows go through LoadRow).
}

void StoreScalar(Type type, float v, void* p) {
  switch (type) {
    case Type::kF32:
      std::memcpy(p, &v, sizeof(v));
      return;
    case Type::kF16: {
      const uint16_t h = Fp32ToFp16(v);
      std::memcpy(p, &h, sizeof(h));
      return;
    }
    case Type::kBF16: {
      const uint16_t h = Fp32ToBf16(v);
      std::memcpy(p, &h, sizeof(h));
      return;
    }
    case Type::kI32: {
      int32_t i = 0;
      if (std::isnan(v)) {
        i = 0;
      } else if (v >= 2147483648.0f) {
        i = std::numeric_limits<int32_t>::max();
      } else if (v < -2147483648.0f) {
        i = std::numeric_limits<int32_t>::min();
      } else {
        i = static_cast<int32_t>(v);
      }
      std::memcpy(p, &i, sizeof(i));
      return;
    }
    case Type::kI64: {
      // Row ids are stored only by copies; saturate as I32 does.
      int64_t i = 0;
      if (!std::isnan(v)) {
        i = v >= 9.2233720368547758e18f ? std::numeric_limits<int64_t>::max()
            : v < -9.2233720368547758e18f ? std::numeric_limits<int64_t>::min()
                                          : static_cast<int64_t>(v);
      }
      std::memcpy(p, &i, sizeof(i));
      return;
    }
    case Type::kQ8_0:
    case Type::kQ4_0:
    case Type::kQ4_1:
    case Type::kQ5_0:
    case Type::kQ5_1:
    case Type::kQ2_K:
    case Type::kQ3_K:
    case Type::kQ4_K:
    case Type::kQ5_K:
    case Type::kQ6_K:
      return;  // Quantized types never reach here (rows go through StoreRow).
  }
}

void LoadRow(const Tensor& t, int64_t i1, int64_t i2, int64_t i3,
             std::vector<float>& out) {
  out.resize(t.ne[0]);
  if (t.ne[0] == 0) return;
  if (Traits(t.type).is_quantized) {
    RowToFloat(t.type, RowPtr(t, i1, i2, i3), out.data(), t.ne[0]);
    return;
  }
  for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) {
    out[i0] = LoadScalar(t.type, ElementPtr(t, i0, i1, i2, i3));
  }
}

void StoreRow(const Tensor& t, int64_t i1, int64_t i2, int64_t i3,
              const float* values) {
  if (t.ne[0] == 0) return;
  if (Traits(t.type).is_quantized) {
    RowFromFloat(t.type, values, RowPtr(t, i1, i2, i3), t.ne[0]);
    return;
  }
  for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) {
    StoreScalar(t.type, values[i0], ElementPtr(t, i0, i1, i2, i3));
  }
}

std::string Where(const Tensor& node) {
  const int32_t op = static_cast<int32_t>(node.op);
  if (op < 0 || op >= kOpCount) return absl::StrCat("[Reference op ", op, "] ");
  return absl::StrCat("[Reference ", std::string(OpName(node.op)), "] ");
}

}  // namespace reference_internal

absl::Status ReferenceCompute(Tensor& node, int ith, int nth) {
  using namespace reference_internal;  // NOLINT(build/namespaces)
  if (nth < 1 || ith < 0 || ith >= nth) {
    return Invalid(node, "part ", ith, " of ", nth, " does not exist");
  }
  TESSERA_RETURN_IF_ERROR(CheckNode(node, Where(node)));
  if (IsViewOp(node.op)) return absl::OkStatus();  // no work
  switch (node.op) {
    case Op::kDup:
    case Op::kCpy:
    case Op::kCont:
      return ComputeCopy(node, ith, nth);
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      return ComputeBinary(node, ith, nth);
    case Op::kScale:
    case Op::kSqr:
    case Op::kSqrt:
    case Op::kLog:
    case Op::kUnary:
      return ComputeUnaryLike(node, ith, nth);
    case Op::kGlu:
      return ComputeGlu(node, ith, nth);
    case Op::kSumRows:
    case Op::kMean:
      return ComputeSumRows(node, ith, nth);
    case Op::kArgmax:
      return ComputeArgmax(node, ith, nth);
    case Op::kNorm:
    case Op::kRmsNorm:
      return ComputeNorm(node, ith, nth);
    case Op::kMulMat:
      return ComputeMulMat(node, ith, nth);
    case Op::kGetRows:
      return ComputeGetRows(node, ith, nth);
    case Op::kSetRows:
      return ComputeSetRows(node, ith, nth);
    case Op::kSoftMax:
      return ComputeSoftMax(node, ith, nth);
    case Op::kRope:
      return ComputeRope(node, ith, nth);
    case Op::kConcat:
      return ComputeConcat(node, ith, nth);
    case Op::kArgsort:
      return ComputeArgsort(node, ith, nth);
    case Op::kFlashAttnExt:
      return ComputeFlashAttnExt(node, ith, nth);
    default:  // CheckNode has passed only the ops above.
      break;
  }
  return Invalid(node, "unknown op");
}

}  // namespace tessera
