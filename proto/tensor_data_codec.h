#ifndef TESSERA_PROTO_TENSOR_DATA_CODEC_H_
#define TESSERA_PROTO_TENSOR_DATA_CODEC_H_

// Tensor data of a graph's executions on the wire (v1::TensorData): inputs
// the client sends inline, inputs the daemon reads as inline bytes or a
// buffer range, and outputs the daemon returns inline.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/repeated_field.h"
#include "graph/tensor.h"
#include "proto/graph_codec.h"
#include "proto/tessera.pb.h"

namespace tessera::wire {

// Host data for one tensor of a graph: an input to send or an output to
// fill (`size` must be the tensor's byte size).
struct TensorInput {
  const Tensor* tensor = nullptr;
  const void* data = nullptr;
  size_t size = 0;
};
struct TensorOutput {
  const Tensor* tensor = nullptr;
  void* data = nullptr;
  size_t size = 0;
};

// Appends `inputs` to `out` as inline data under their ids in `graph`.
// Errors: INVALID_ARGUMENT for a tensor not in `graph`.
absl::Status ToProto(absl::Span<const TensorInput> inputs,
                     const EncodedGraph& graph,
                     google::protobuf::RepeatedPtrField<v1::TensorData>& out);

// Copies `results` (in the order asked) into `outputs`.
// Errors: DATA_LOSS for a count or a size that differs from what was asked.
absl::Status FromProto(
    const google::protobuf::RepeatedPtrField<v1::TensorData>& results,
    absl::Span<const TensorOutput> outputs);

// One tensor's data as a request carries it: inline bytes (pointing into
// the message) or a range of a session buffer.
struct TensorSource {
  uint32_t id = 0;
  bool is_inline = false;
  absl::string_view bytes;  // when is_inline
  uint64_t buffer = 0;      // otherwise
  uint64_t offset = 0;
};
// Errors: INVALID_ARGUMENT "neither data nor ref".
absl::StatusOr<TensorSource> FromProto(const v1::TensorData& data);

// Appends an output `id` of `bytes` inline bytes to `outputs` and returns
// them to fill (valid while the message is unchanged).
std::string& AppendOutput(
    uint32_t id, size_t bytes,
    google::protobuf::RepeatedPtrField<v1::TensorData>& outputs);

}  // namespace tessera::wire

#endif  // TESSERA_PROTO_TENSOR_DATA_CODEC_H_
