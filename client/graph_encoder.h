#ifndef TESSERA_CLIENT_GRAPH_ENCODER_H_
#define TESSERA_CLIENT_GRAPH_ENCODER_H_

#include "absl/status/statusor.h"
#include "client/client.h"
#include "graph/graph.h"
#include "proto/graph_codec.h"

namespace tessera::client {

using EncodedGraph = wire::EncodedGraph;

// Encodes `graph` with the wire codec (proto/graph_codec.h), data as this
// client places it: a tensor whose data lies in a RemoteBuffer of `client`
// travels as (buffer handle, offset); one without data is allocated by the
// daemon or supplied as an input; one in a buffer of a meta RemoteDevice
// with a split policy also carries its split state. With `require_data`, every
// tensor except views must lie in `client`'s remote buffers (a graph placed by
// a local scheduler). Errors: INVALID_ARGUMENT naming the tensor for data in
// another client's or a local buffer, unallocated data where remote data is
// required, or a view that is not a node and has no data.
absl::StatusOr<EncodedGraph> EncodeGraph(const Graph& graph, Client& client,
                                         bool require_data);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_GRAPH_ENCODER_H_
