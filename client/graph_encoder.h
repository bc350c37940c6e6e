#ifndef TESSERA_CLIENT_GRAPH_ENCODER_H_
#define TESSERA_CLIENT_GRAPH_ENCODER_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "proto/tessera.pb.h"

namespace tessera::client {

// A graph in wire form and the id each tensor got.
struct EncodedGraph {
  v1::GraphDef def;
  absl::flat_hash_map<const Tensor*, uint32_t> ids;

  // The id of `t`. Errors: INVALID_ARGUMENT when `t` is not in the graph.
  absl::StatusOr<uint32_t> IdOf(const Tensor* t) const;
  // Appends `inputs` as inline data.
  absl::Status AddInputs(
      absl::Span<const TensorInput> inputs,
      google::protobuf::RepeatedPtrField<v1::TensorData>& out) const;
};

// Copies the daemon's `results` (in the order asked) into `outputs`.
// Errors: DATA_LOSS for a count or a size that differs from what was asked.
absl::Status CopyOutputs(
    const google::protobuf::RepeatedPtrField<v1::TensorData>& results,
    absl::Span<const TensorOutput> outputs);

// Encodes the nodes of `graph` and every tensor they read (sources and view
// sources, recursively), each defined before its first use. A tensor that is
// not a node of `graph` travels as a leaf: with its data as (buffer handle,
// offset) when it lies in a RemoteBuffer of `client`, else as an input that
// the request supplies. Nodes that are not views carry their data the same
// way when they have it (results land there); otherwise the daemon
// allocates them. With `require_data`, every tensor except views must lie in
// `client`'s remote buffers (a graph placed by a local scheduler).
// Errors: INVALID_ARGUMENT naming the tensor for data in another client's
// or a local buffer where remote data is required, or a view that is not a
// node and has no data.
absl::StatusOr<EncodedGraph> EncodeGraph(const Graph& graph, Client& client,
                                         bool require_data);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_GRAPH_ENCODER_H_
