#ifndef TESSERA_SERVER_DECODING_GRAPH_DECODER_H_
#define TESSERA_SERVER_DECODING_GRAPH_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backend/buffer.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "proto/graph_codec.h"
#include "proto/tessera.pb.h"

namespace tessera::server {

// Looks up a buffer handle of the requesting session (NOT_FOUND otherwise).
using BufferResolver =
    std::function<absl::StatusOr<std::shared_ptr<Buffer>>(uint64_t handle)>;

// A graph from the wire after validation: tensors owned by `ctx`, the
// nodes in the order given and the leafs they use. Leafs with data point
// into session buffers (kept alive by `buffers`); leafs without data are the
// inputs, flagged kFlagInput; views get their data from their source when
// the scheduler allocates the graph.
struct DecodedGraph {
  std::unique_ptr<Context> ctx = std::make_unique<Context>();
  std::unique_ptr<Graph> graph;
  absl::flat_hash_map<uint32_t, Tensor*> by_id;
  // The leafs of `graph` without data, in graph order.
  std::vector<Tensor*> inputs;
  std::vector<std::shared_ptr<Buffer>> buffers;
  // The nodes and leafs of `graph`.
  absl::flat_hash_set<const Tensor*> members;

  // The tensor `id`. Errors: INVALID_ARGUMENT naming `what` (e.g.
  // "outputs[2]") when the graph has no such tensor.
  absl::StatusOr<Tensor*> Find(uint32_t id, absl::string_view what) const;
  // Whether `t` is a node or leaf of `graph`.
  bool InGraph(const Tensor* t) const { return members.contains(t); }
};

using DecodeLimits = wire::GraphLimits;

// Decodes `def` with the wire codec (proto/graph_codec.h: the structure of
// each tensor and the node list, checked there) and adds, per tensor:
//  1. data (not on views): the buffer handle resolves in the session and
//     the tensor's bytes (CheckedNumBytes) lie inside the buffer. A node
//     with data writes its result there (a graph the client placed, as
//     RemoteDevice streams send); a leaf with data is a weight or cache.
//     A split state (data in a meta device's buffer) is checked and
//     recorded by PlaceSplit (split_tensor.h).
//  2. graph/ops.h ValidateNode: the op accepts the sources' types and
//     shapes and the node's shape, strides, op_params and view are exactly
//     what its builder derives;
//  3. graph/node_checks.h CheckNodeShape: every shape check the kernels
//     run is passed before anything is placed (zero heads, zero-size
//     dimensions a source does not broadcast over are refused here).
// Errors: INVALID_ARGUMENT naming the tensor (id and name) and the problem;
// NOT_FOUND for a data buffer the session does not hold; RESOURCE_EXHAUSTED
// for more tensors than limits.max_tensors.
absl::StatusOr<std::unique_ptr<DecodedGraph>> DecodeGraph(
    const v1::GraphDef& def, const BufferResolver& resolve,
    const DecodeLimits& limits);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_DECODING_GRAPH_DECODER_H_
