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

// The types FLASH_ATTN_EXT reads keys and values in: F32, F16, BF16, Q8_0,
// Q4_0, Q4_1, Q5_0 and Q5_1, the KV cache types of llama.cpp's
// --cache-type-k/-v that tessera has; kAttnKvTypeNames names them in
// messages.
bool IsAttnKvType(Type type);
inline constexpr char kAttnKvTypeNames[] =
    "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or q5_1";

}  // namespace tessera

#endif  // TESSERA_GRAPH_OP_TYPES_H_
