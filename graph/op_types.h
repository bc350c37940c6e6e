#ifndef TESSERA_GRAPH_OP_TYPES_H_
#define TESSERA_GRAPH_OP_TYPES_H_

// The type combinations each op has, the same on every device: what a
// device's kernels must accept before its own limits (sizes, layouts) come
// in.

#include "graph/tensor.h"

namespace tessera {

// Whether `node` is an op of the enum (with a valid sub-op for UNARY, GLU
// and ARGSORT) of a valid type, whose required sources are present with a
// type combination the op has. Shapes are not checked here. View ops and
// NONE always have their types.
bool OpHasTypes(const Tensor& node);

}  // namespace tessera

#endif  // TESSERA_GRAPH_OP_TYPES_H_
