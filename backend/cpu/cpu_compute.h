#ifndef TESSERA_BACKEND_CPU_CPU_COMPUTE_H_
#define TESSERA_BACKEND_CPU_CPU_COMPUTE_H_

// Kernel dispatch of the CPU device: the one place that decides which
// kernel computes a node and which nodes the CPU can compute.

#include "absl/status/status.h"
#include "graph/tensor.h"

namespace tessera {

// Whether the CPU kernels compute `node`: its op is in the enum (with a
// valid sub-op for UNARY, GLU and ARGSORT), its required sources are
// present, and its type combination is one the kernels have. Shapes are
// checked by the kernels. View ops and NONE are always supported.
bool CpuSupportsNode(const Tensor& node);

// Computes part `ith` of `nth` of `node` (split by output rows; `nth`
// threads calling with ith = 0..nth-1 together compute it). Data pointers
// must be host memory. Errors: those of the kernel (INVALID_ARGUMENT for a
// bad type combination or a data-dependent error).
absl::Status CpuComputeNode(Tensor& node, int ith, int nth);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_COMPUTE_H_
