#ifndef TESSERA_PROTO_GRAPH_CODEC_H_
#define TESSERA_PROTO_GRAPH_CODEC_H_

// Graphs on the wire: a Graph of the IR <-> v1::GraphDef. Both ends link
// this one mapping; the client supplies where tensor data lives (a
// RemoteBuffer is a client concept), the server resolves data refs against
// the session's buffers and validates each tensor through hooks.
//
//   // Client:
//   auto encoded = wire::ToProto(graph, [&](const Tensor& t) { ... });
//   request.mutable_graph()->Swap(&encoded->def);
//   // Server:
//   Context ctx;
//   auto decoded = wire::FromProto(request.graph(), limits, hooks, ctx);

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backend/meta/split_state.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "proto/tessera.pb.h"

namespace tessera::wire {

// A graph in wire form and the id each tensor got.
struct EncodedGraph {
  v1::GraphDef def;
  absl::flat_hash_map<const Tensor*, uint32_t> ids;

  // The id of `t`. Errors: INVALID_ARGUMENT when `t` is not in the graph.
  absl::StatusOr<uint32_t> IdOf(const Tensor* t) const;
};

// Where a tensor's data lies on the daemon: a (buffer handle, offset), or
// nullopt when it has none (the daemon allocates it, or the request supplies
// it as an input). An error stops the encoding and is returned as is.
using DataRefFn =
    std::function<absl::StatusOr<std::optional<v1::TensorRef>>(const Tensor&)>;

// The split state a tensor with data names on the wire (its data in a meta
// device's buffer), or nullopt for none. An error stops the encoding.
using SplitFn =
    std::function<absl::StatusOr<std::optional<SplitState>>(const Tensor&)>;

// INVALID_ARGUMENT "[EncodeGraph] tensor 'NAME': PROBLEM", the form of every
// encoding error (for DataRefFn implementations too).
absl::Status EncodeError(const Tensor& t, absl::string_view problem);

// Encodes the nodes of `graph` and every tensor they read (sources and view
// sources, recursively), each defined before its first use; then the leafs
// of `graph` not yet encoded. Ids are assigned in that order from 0. A
// tensor that is not a node travels as a leaf (no op, no sources) with the
// data `data_ref` gives it; nodes that are not views carry their data the
// same way when they have it (results land there). Views that are nodes
// never carry data. Trailing zero op_params and absent sources are left
// out; flags other than input, output and param are dropped.
// A tensor that carries data also carries the split state `split_of` gives
// it (when set).
// Errors: those of `data_ref` and `split_of`; INVALID_ARGUMENT naming the
// tensor for a view that is not a node and has no data.
absl::StatusOr<EncodedGraph> ToProto(const Graph& graph,
                                     const DataRefFn& data_ref,
                                     const SplitFn& split_of = nullptr);

struct GraphLimits {
  // Most tensors in a GraphDef.
  uint32_t max_tensors = 8192;
  // Longest tensor name.
  size_t max_name_bytes = 256;
};

// What the decoding end adds to the structural mapping. Each hook's error
// is returned with its code and its message prefixed by
// "[DecodeGraph] tensor ID (\"NAME\"): ".
struct GraphHooks {
  // For a tensor with data (never a view): points `t` at the data `ref`
  // names, whose `bytes` (the tensor's checked byte span) must fit there.
  // Unset: a tensor with data is INVALID_ARGUMENT.
  std::function<absl::Status(Tensor& t, const v1::TensorRef& ref,
                             size_t bytes)>
      place_data;
  // For a tensor with data and a split state, after place_data: checks the
  // state against where the data lies (and records it there). Unset: a
  // split state is INVALID_ARGUMENT.
  std::function<absl::Status(Tensor& t, const SplitState& state)> place_split;
  // For every tensor once its structure and data are decoded, before later
  // tensors may refer to it. Unset: no check.
  std::function<absl::Status(const Tensor& t)> validate;
};

// A decoded GraphDef: the graph (nodes in the order given, the leafs they
// use), the tensors by wire id, and the graph's inputs (leafs without data
// and not views, flagged kFlagInput, in graph order).
struct DecodedGraphDef {
  std::unique_ptr<Graph> graph;
  absl::flat_hash_map<uint32_t, Tensor*> by_id;
  std::vector<Tensor*> inputs;
  // The nodes and leafs of `graph`.
  absl::flat_hash_set<const Tensor*> members;
};

// Decodes `def` into tensors owned by `ctx`, checking each tensor in order:
//  1. a name of at most limits.max_name_bytes; id unique; type known; 1 to
//     4 dims (Context::NewTensor's checks); nb empty (contiguous) or 4
//     strides with nb[0] the block's bytes unless a view; the byte span
//     without overflow (CheckedNumBytes); op known; at most 16 op_params;
//     at most 10 sources, each -1 or the id of an EARLIER tensor (so no
//     forward reference and no cycle); view_src likewise; view_offs only
//     with view_src; only known flags (input on the wire is ignored).
//  2. data: not on a view; then hooks.place_data. A leaf without data that
//     is not a view is an input. A split state: only with data, well formed
//     (proto/split_state_codec.h), then hooks.place_split.
//  3. hooks.validate.
// Then the nodes (GraphDef.nodes, or every tensor with an op): known ids of
// op tensors, each once, each source and view source a leaf or a node
// listed earlier; at most limits.max_tensors nodes and leafs.
// Errors: INVALID_ARGUMENT "[DecodeGraph] tensor ID (\"NAME\"): PROBLEM";
// RESOURCE_EXHAUSTED for more than limits.max_tensors tensors or nodes;
// a hook's error as above.
absl::StatusOr<DecodedGraphDef> FromProto(const v1::GraphDef& def,
                                          const GraphLimits& limits,
                                          const GraphHooks& hooks,
                                          Context& ctx);

}  // namespace tessera::wire

#endif  // TESSERA_PROTO_GRAPH_CODEC_H_
