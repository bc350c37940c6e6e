#ifndef TESSERA_SERVER_DECODING_GRAPH_IO_H_
#define TESSERA_SERVER_DECODING_GRAPH_IO_H_

// Inputs and outputs of a decoded graph (graph_decoder.h) on the wire.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/repeated_field.h"
#include "graph/tensor.h"
#include "proto/tessera.pb.h"
#include "sched/scheduler.h"
#include "server/decoding/graph_decoder.h"

namespace tessera::server {

// Checks `inputs` against the graph: each names one of graph.inputs, at
// most once; inline data has exactly the tensor's bytes, at most
// `max_inline_bytes` (the daemon's max_chunk_bytes: larger tensors go
// through a buffer); a buffer range (ref) resolves in the session and holds
// the tensor's bytes. With `require_all`, every input of the graph must be
// given. Returns the tensors, in the order of `inputs`. Writes nothing.
// Errors: INVALID_ARGUMENT naming inputs[i] and the problem; NOT_FOUND for
// a ref to a buffer the session does not hold.
absl::StatusOr<std::vector<Tensor*>> CheckInputs(
    const DecodedGraph& graph,
    const google::protobuf::RepeatedPtrField<v1::TensorData>& inputs,
    const BufferResolver& resolve, bool require_all, size_t max_inline_bytes);

// Writes checked `inputs` into `tensors` (allocated by the scheduler).
absl::Status WriteInputs(
    const google::protobuf::RepeatedPtrField<v1::TensorData>& inputs,
    const std::vector<Tensor*>& tensors, const BufferResolver& resolve);

// The tensors of `ids`, each in the graph and accepted by `readable`
// (which names the problem otherwise), with at most `max_bytes` in all.
// Errors: INVALID_ARGUMENT naming outputs[i]; RESOURCE_EXHAUSTED when the
// outputs exceed max_bytes.
absl::StatusOr<std::vector<Tensor*>> CheckOutputs(
    const DecodedGraph& graph,
    const google::protobuf::RepeatedField<uint32_t>& ids,
    const std::function<absl::Status(const Tensor&)>& readable,
    size_t max_bytes);

// Queues, through `sched`, the reads of `tensors` (as CheckOutputs returned
// them for `ids`) into `outputs` as inline data, in order. The reads land
// once the scheduler's work is done; `outputs` must stay in place until
// then. Stops at the first error (the outputs appended so far stay).
absl::Status ReadOutputs(
    Scheduler& sched, const google::protobuf::RepeatedField<uint32_t>& ids,
    const std::vector<Tensor*>& tensors,
    google::protobuf::RepeatedPtrField<v1::TensorData>& outputs);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_DECODING_GRAPH_IO_H_
