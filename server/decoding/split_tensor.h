#ifndef TESSERA_SERVER_DECODING_SPLIT_TENSOR_H_
#define TESSERA_SERVER_DECODING_SPLIT_TENSOR_H_

// Split states from the wire (proto/split_state_codec.h) applied to tensors
// in a meta device's buffers (backend/meta/meta_device.h): a graph tensor
// whose data is split, and a WriteTensor that scatters a whole tensor over
// the members.

#include <cstddef>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/meta/meta_device.h"
#include "backend/meta/split_state.h"
#include "graph/tensor.h"
#include "proto/tessera.pb.h"

namespace tessera::server {

// The most tensors one AllocBuffer may place: as many as a meta buffer
// keeps split states for.
inline constexpr int kMaxPlacedTensors = MetaBuffer::kMaxStates;

// A packed weights buffer (MetaBufferType::AllocPacked) of `size` bytes of
// `type`, a meta device's memory, for the tensors of an AllocBufferRequest's
// `placed`: each layout well formed (proto/split_state_codec.h), its rows
// whole blocks, at an offset aligned to the type and inside `size`, its
// split fitting the device; no two overlapping; at most kMaxPlacedTensors.
// Errors: INVALID_ARGUMENT naming the problem; the allocation's.
absl::StatusOr<std::unique_ptr<Buffer>> AllocPacked(
    BufferType& type, size_t size,
    const google::protobuf::RepeatedPtrField<v1::PlacedTensor>& placed);

// For a graph tensor `t` whose data was placed in a session buffer: checks
// that the buffer is a meta device's, that `state` fits `t` and the
// device's member count (ValidateSplit) and that it is the state the data
// was written with, if it was written split; then records it for the
// tensor, so that the device computes with it.
// Errors: INVALID_ARGUMENT naming the problem.
absl::Status PlaceSplit(Tensor& t, const SplitState& state);

// The tensor a write with `layout` (WriteTensor, WriteTensorByHash)
// scatters into bytes [offset, offset + size) of
// `buffer` (a checked range): the layout well formed
// (proto/split_state_codec.h), contiguous, of the layout's type and shape at
// `offset`, its byte size `size`, in a meta device's buffer, its split fitting
// the device (recorded for later graphs and reads). Errors: INVALID_ARGUMENT
// naming the problem.
absl::StatusOr<Tensor> SplitWriteTarget(Buffer& buffer, size_t offset,
                                        size_t size,
                                        const v1::TensorLayout& layout);

// The tensor a read with `layout` (ReadTensor) gathers from bytes
// [offset, offset + size) of `buffer`: as SplitWriteTarget, and `layout`'s
// split must be the one the tensor was written with. Errors:
// INVALID_ARGUMENT naming the problem.
absl::StatusOr<Tensor> SplitReadSource(Buffer& buffer, size_t offset,
                                       size_t size,
                                       const v1::TensorLayout& layout);

// Writes bytes [done, done + size) of a write that starts at `offset` of
// `buffer`: scattered as bytes of `split` when given (SplitWriteTarget),
// else as they are.
absl::Status WriteBytes(Buffer& buffer, size_t offset,
                        std::optional<Tensor>& split, size_t done,
                        const void* data, size_t size);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_DECODING_SPLIT_TENSOR_H_
