#include "backend/cpu/cpu_compute.h"

#include <cstdint>

#include "backend/cpu/cpu_copy.h"
#include "backend/cpu/cpu_flash_attn.h"
#include "backend/cpu/cpu_indexed_rows.h"
#include "backend/cpu/cpu_mul_mat.h"
#include "backend/cpu/cpu_row_ops.h"
#include "graph/reference.h"

namespace tessera {
size_t CpuWorkSize(const Tensor& node, int nth, const CpuKernels& kernels) {
  switch (node.op) {
    case Op::kMulMat:
      return MulMatWorkSize(node, nth, kernels);
    case Op::kFlashAttnExt:
      return FlashAttnWorkSize(node, nth);
    default:
      return 0;
  }
}

bool CpuIsParallelWorthy(const Tensor& node) {
  // Element operations below which one thread is faster than a team.
  constexpr int64_t kMinCost = 1 << 16;
  int64_t cost = node.NumElements();
  if (node.op == Op::kMulMat && node.src[0] != nullptr) {
    cost *= node.src[0]->ne[0];
  }
  if (node.op == Op::kFlashAttnExt && node.src[1] != nullptr) {
    cost *= node.src[1]->ne[1];  // every output value meets every key
  }
  return cost >= kMinCost;
}

absl::Status CpuComputeNode(Tensor& node, const CpuComputeContext& ctx) {
  bool done = false;
  switch (node.op) {
    case Op::kMulMat:
      done = TryMulMat(node, ctx);
      break;
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      done = TryBinary(node, ctx);
      break;
    case Op::kDup:
    case Op::kCpy:
    case Op::kCont:
      done = TryCopy(node, ctx);
      break;
    case Op::kGetRows:
      done = TryGetRows(node, ctx);
      break;
    case Op::kSetRows:
      done = TrySetRows(node, ctx);
      break;
    case Op::kUnary:
      done = TryUnary(node, ctx);
      break;
    case Op::kGlu:
      done = TryGlu(node, ctx);
      break;
    case Op::kNorm:
    case Op::kRmsNorm:
      done = TryNorm(node, ctx);
      break;
    case Op::kSoftMax:
      done = TrySoftMax(node, ctx);
      break;
    case Op::kRope:
      done = TryRope(node, ctx);
      break;
    case Op::kFlashAttnExt:
      done = TryFlashAttn(node, ctx);
      break;
    default:
      break;
  }
  if (done) return absl::OkStatus();
  return ReferenceCompute(node, ctx.ith, ctx.nth);
}

}  // namespace tessera
