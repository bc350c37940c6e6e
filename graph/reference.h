#ifndef TESSERA_GRAPH_REFERENCE_H_
#define TESSERA_GRAPH_REFERENCE_H_

// Naive reference kernels: the oracle that every device is tested against.
// Written for clarity, not speed: every value is converted to float (double
// for accumulations) and every access goes through the byte strides, so
// permuted and strided views work everywhere.

#include "absl/status/status.h"
#include "graph/tensor.h"

namespace tessera {

// Computes `node` from its sources. All data pointers must be host memory.
// The work is split into `nth` parts by output rows; part `ith` is done
// here, so `nth` threads calling with ith = 0..nth-1 together compute the
// node (callers synchronize between nodes). ith = 0, nth = 1 does it all.
// View ops and NONE do nothing. Ops that may run in place (dst aliasing
// src[0]: elementwise, SCALE, UNARY, RMS_NORM, NORM, SOFT_MAX, ROPE) are
// correct when they do.
// Errors: INVALID_ARGUMENT for a type combination the op does not have or
// a data-dependent error (an out-of-range row index); UNIMPLEMENTED never.
absl::Status ReferenceCompute(Tensor& node, int ith = 0, int nth = 1);

}  // namespace tessera

#endif  // TESSERA_GRAPH_REFERENCE_H_
