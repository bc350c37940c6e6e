#ifndef TESSERA_PROTO_GGML_RPC_NUMBERING_H_
#define TESSERA_PROTO_GGML_RPC_NUMBERING_H_

// ggml's numbering of ops and tensor flags (include/ggml.h at the commit
// protocol.h names: GGML_OP_COUNT 101) and its mapping to tessera's. Every
// ggml op that tessera implements maps; the rest are refused with their
// ggml name. Type ids map through model/ggml_type.h, the one table of
// ggml's types.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace tessera::ggml_rpc {

inline constexpr uint32_t kGgmlOpCount = 101;
inline constexpr uint32_t kGgmlOpNone = 0;

// "ADD (2)"; "250" for an id beyond the enum.
std::string GgmlOpName(uint32_t op);

// A node's op and op_params in tessera's terms.
struct MappedOp {
  Op op = Op::kNone;
  int32_t op_params[kMaxOpParams] = {};
};

// Maps ggml op `op` with its `op_params`: the op itself, and the params
// whose numbering differs (the UNARY and GLU sub-ops; TRANSPOSE's axes,
// which ggml leaves zero; FLASH_ATTN_EXT's precision in [3], which only
// allows F32 accumulation and is dropped as tessera accumulates in F32).
// Everything else is copied for the op's own validation.
// Errors: INVALID_ARGUMENT naming the op or sub-op when tessera does not
// implement it or it is out of range.
absl::StatusOr<MappedOp> OpFromGgml(uint32_t op,
                                    const int32_t op_params[kMaxOpParams]);

// tessera's flags from ggml's (INPUT 1, OUTPUT 2, PARAM 4, LOSS 8, COMPUTE
// 16): output and param kept; input, loss and compute only guide ggml's
// own scheduling and training and are dropped. Errors: INVALID_ARGUMENT
// for bits ggml does not define.
absl::StatusOr<uint32_t> FlagsFromGgml(int32_t flags);

}  // namespace tessera::ggml_rpc

#endif  // TESSERA_PROTO_GGML_RPC_NUMBERING_H_
