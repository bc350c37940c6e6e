#ifndef TESSERA_BACKEND_CPU_CPU_ROW_OPS_H_
#define TESSERA_BACKEND_CPU_CPU_ROW_OPS_H_

// Fast F32 paths of the row-wise ops of the CPU device: ADD, SUB, MUL, DIV
// (src1 broadcast over rows), UNARY SILU and GELU, GLU (SwiGLU, GeGLU,
// split or with a separate gate, swapped), NORM, RMS_NORM, SOFT_MAX
// (optional F32 mask, ALiBi), ROPE (normal and NeoX, YaRN, frequency
// factors). Each Try* computes part ctx.ith of ctx.nth of `node` (split by
// rows) and returns true when the node fits the fast path: F32 operands
// with contiguous rows (nb[0] = 4), consistent shapes and valid
// parameters. Otherwise it returns false having done nothing, and the
// caller runs the reference kernel, which reports any error. Every thread
// of the team gets the same answer. dst may alias src[0].

#include "backend/cpu/cpu_compute.h"
#include "graph/tensor.h"

namespace tessera {

bool TryBinary(Tensor& node, const CpuComputeContext& ctx);
bool TryUnary(Tensor& node, const CpuComputeContext& ctx);
bool TryGlu(Tensor& node, const CpuComputeContext& ctx);
bool TryNorm(Tensor& node, const CpuComputeContext& ctx);
bool TrySoftMax(Tensor& node, const CpuComputeContext& ctx);
bool TryRope(Tensor& node, const CpuComputeContext& ctx);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_ROW_OPS_H_
