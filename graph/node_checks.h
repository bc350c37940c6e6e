#ifndef TESSERA_GRAPH_NODE_CHECKS_H_
#define TESSERA_GRAPH_NODE_CHECKS_H_

// The checks every device runs on a node before its kernels read memory:
// the reference kernels (graph/reference.cc) and the CUDA device
// (backend/cuda/cuda_compute.cc) call CheckNode and add only their own
// limits. graph/ops.h ValidateNode is the stricter check of graphs that
// arrive from outside (the node equals what its builder makes); CheckNode
// is what the kernels themselves rely on, on any node they are given.

#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "graph/tensor.h"

namespace tessera {

// A device's own limits on one operand of a node (alignment, index widths).
// `t` has passed the common operand checks; `role` names it in messages
// ("dst" for the node itself, else "a", "b", "mask", ...).
using OperandLimits =
    absl::FunctionRef<absl::Status(const Tensor& t, const char* role)>;

// Checks that the kernels of `node`'s op can compute it without reading or
// writing outside any tensor's memory:
//  1. every operand the op reads or writes (the node itself as "dst") is
//     present, of a valid type, with non-negative dimensions, ne[0] a
//     multiple of the block size, quantized blocks contiguous within a row
//     (nb[0] is the block size) and data unless it is empty; `limits` then
//     runs on it;
//  2. the operands' types are a combination the op has (graph/op_types.h),
//     and its sub-op (UNARY, GLU, ARGSORT) and parameters (dims, modes, eps)
//     are in range;
//  3. the sources' shapes are consistent with each other and the node's.
// View ops and NONE pass at once (they do no work).
// Errors: INVALID_ARGUMENT, the message `where` (e.g. "[Reference ADD] ")
// followed by the problem, e.g. "b f32 [3, 2, 1, 1] does not broadcast to a
// f32 [4, 2, 1, 1]". Which of several problems is named is unspecified.
absl::Status CheckNode(const Tensor& node, std::string_view where,
                       OperandLimits limits);
// The same with no device limits.
absl::Status CheckNode(const Tensor& node, std::string_view where);
// The checks of CheckNode that do not depend on memory (operands need no
// data, no device limits): what validation of a graph from outside runs
// before any memory is placed, so that nothing a kernel would refuse (zero
// heads, zero-size dimensions a source cannot broadcast over) gets that far.
absl::Status CheckNodeShape(const Tensor& node, std::string_view where);
// Whether kernels can read `t` with its type's alignment (TypeAlignment):
// every stride and, for a view, its offset into the source are multiples
// of it. Errors: INVALID_ARGUMENT naming the stride or offset.
absl::Status CheckAlignment(const Tensor& t);

}  // namespace tessera

#endif  // TESSERA_GRAPH_NODE_CHECKS_H_
