#ifndef TESSERA_PROTO_GGML_RPC_TENSOR_CODEC_H_
#define TESSERA_PROTO_GGML_RPC_TENSOR_CODEC_H_

// ggml-rpc tensors (protocol.h WireTensor) and graphs (GRAPH_COMPUTE's
// payload) into tessera's wire form, v1::GraphDef, which the daemon then
// decodes and validates as every graph from the gRPC side
// (server/decoding/graph_decoder.h): one validation for both protocols.
//
// Where a tensor's bytes lie is the daemon's business: ggml sends the
// remote pointers the daemon handed out (a buffer's id and an address
// inside it), and the caller's PlaceFn turns them into a (buffer handle,
// offset) after checking them.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/ggml_rpc/protocol.h"
#include "proto/tessera.pb.h"

namespace tessera::ggml_rpc {

// The byte span of `t` as ggml counts it (ggml_nbytes: the last element's
// end, through the strides nb), for any ggml type whose block layout
// model/ggml_type.h knows. Errors: INVALID_ARGUMENT for an unknown type, a
// row that is not whole blocks, or a span that overflows.
absl::StatusOr<uint64_t> TensorBytes(const WireTensor& t);

// Resolves the `bytes` bytes at remote address `data` of the buffer whose
// remote pointer is `buffer`. Errors name the problem (a buffer the
// connection does not hold, a range outside it).
using PlaceFn = std::function<absl::StatusOr<v1::TensorRef>(
    uint64_t buffer, uint64_t data, uint64_t bytes)>;

struct GraphRequest {
  uint32_t device = 0;
  v1::GraphDef def;
};

// Parses GRAPH_COMPUTE's `payload` (protocol.h):
//  1. the sizes: the header, n_nodes from 1 and n_tensors from n_nodes to
//     `max_tensors`, and the payload exactly as long as they say;
//  2. tensor ids: non-zero and unique; node ids: each a tensor, once;
//  3. the tensors the nodes reach through src and view_src (ids that must
//     be in the payload), in an order where each comes after what it reads
//     (a cycle is an error); the others are ignored, as ggml does;
//  4. each tensor: a tessera type (model/ggml_type.h), dims and strides,
//     flags (numbering.h); a node also its op (OpFromGgml), sources and
//     view. A node without an op (GGML_OP_NONE: ggml lists parameters
//     among the nodes) computes nothing: it travels as a leaf, and the
//     GraphDef's nodes may be empty (the caller must then compute nothing:
//     DecodeGraph reads no nodes as every tensor with an op). SET_ROWS's
//     src[2] (ggml's legacy copy of its destination; may be absent) is
//     dropped. A node of another op with a view source is ggml's in-place
//     form: it must have data at its source's address plus view_offs, and
//     travels as an ordinary node placed there. A view of a tensor that
//     travels without its view source (a leaf that is ggml's view, an
//     in-place result) views that tensor, at the offset relative to it.
//     A tensor that is not a node travels as a leaf with its data
//     (ggml's scheduler passes results of earlier splits that way). Data:
//     views take their source's (and must say the same address); others
//     with a buffer are placed by `place` over their byte span; a leaf
//     must have data; a node without data gets compute memory.
// Errors: INVALID_ARGUMENT "[ggml-rpc graph] ..." naming the tensor (its
// index in the payload and name) and the problem; `place`'s errors the
// same way.
absl::StatusOr<GraphRequest> ParseGraph(absl::Span<const uint8_t> payload,
                                        uint32_t max_tensors,
                                        const PlaceFn& place);

}  // namespace tessera::ggml_rpc

#endif  // TESSERA_PROTO_GGML_RPC_TENSOR_CODEC_H_
