#ifndef TESSERA_BACKEND_CPU_CPU_COMPUTE_H_
#define TESSERA_BACKEND_CPU_CPU_COMPUTE_H_

// Kernel dispatch of the CPU device: the one place that decides which
// kernel computes a node. The CPU computes every node whose types the op
// has (graph/op_types.h); shapes are checked by the kernels.

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "backend/cpu/kernels.h"
#include "graph/tensor.h"

namespace tessera {

// What one thread of a team needs to compute its part of a node.
struct CpuComputeContext {
  int ith = 0;  // this thread, 0..nth-1
  int nth = 1;  // threads computing the node together
  const CpuKernels* kernels = nullptr;
  // Scratch memory shared by the team, at least CpuWorkSize(node, nth,
  // *kernels) bytes, 64-byte aligned.
  char* work = nullptr;
  // Blocks until all nth threads have reached it (a no-op when nth is 1).
  absl::FunctionRef<void()> barrier;
};

// Bytes of scratch memory CpuComputeNode needs for `node` on `nth` threads
// with `kernels`.
size_t CpuWorkSize(const Tensor& node, int nth, const CpuKernels& kernels);

// Whether `node` is worth splitting over threads: below this, a thread
// wake-up and barrier cost more than the work, and one thread computes it.
bool CpuIsParallelWorthy(const Tensor& node);

// Computes part ctx.ith of ctx.nth of `node`: ctx.nth threads calling with
// ith = 0..nth-1 (and the same work memory) together compute it. Fast
// kernels run where the node's types and layout fit them; the reference
// kernels otherwise. All threads take the same path, so a kernel's internal
// barriers are reached by all. Data pointers must be host memory.
// Errors: those of the reference kernels (INVALID_ARGUMENT for a bad type
// combination, shape or a data-dependent error).
absl::Status CpuComputeNode(Tensor& node, const CpuComputeContext& ctx);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_COMPUTE_H_
