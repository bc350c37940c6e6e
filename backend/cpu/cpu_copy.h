#ifndef TESSERA_BACKEND_CPU_CPU_COPY_H_
#define TESSERA_BACKEND_CPU_CPU_COPY_H_

// Fast DUP, CPY and CONT of the CPU device: values moved in flat order
// (ggml's semantics), same type bit for bit (memcpy, quantized blocks
// included) or converted between F32 and F16/BF16 by the level's
// kernels. Two layouts take the fast path: both tensors contiguous (work
// split by elements), or the same shape with contiguous rows (split by
// rows, e.g. CONT of a view with permuted outer dimensions).

#include "backend/cpu/cpu_compute.h"
#include "graph/tensor.h"

namespace tessera {

// Computes part ctx.ith of ctx.nth of `node` and returns true when it fits
// a fast path; returns false having done nothing otherwise (the reference
// kernel then runs). Every thread of the team gets the same answer.
bool TryCopy(Tensor& node, const CpuComputeContext& ctx);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_COPY_H_
