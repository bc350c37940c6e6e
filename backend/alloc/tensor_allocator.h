#ifndef TESSERA_BACKEND_ALLOC_TENSOR_ALLOCATOR_H_
#define TESSERA_BACKEND_ALLOC_TENSOR_ALLOCATOR_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "backend/buffer.h"
#include "graph/tensor.h"

namespace tessera {

// Places tensors one after another in one buffer, each at the buffer type's
// alignment (ggml_tallocr); for weights, which live as long as the buffer.
// Not thread-safe.
class TensorAllocator {
 public:
  explicit TensorAllocator(Buffer& buffer);

  // Gives `t` memory: a view gets its view source's data plus the view
  // offset (the source must be allocated), any other tensor the next
  // aligned range. Sets t.data and t.buffer.
  // Errors: FAILED_PRECONDITION if `t` already has data or is a view of an
  // unallocated tensor; RESOURCE_EXHAUSTED if it does not fit.
  absl::Status Alloc(Tensor& t);

  size_t used() const { return offset_; }

 private:
  Buffer& buffer_;
  size_t offset_ = 0;
};

// Sets a view's data and buffer from its (allocated) view source.
// Errors: FAILED_PRECONDITION if the source has no data.
absl::Status InitView(Tensor& view);

// One buffer of `type` holding every tensor in `tensors` that has no data
// yet (views are placed after their sources), of usage `usage`. Weights
// (kWeights) get BufferType::AllocPlaced: the buffer may hold exactly those
// tensors and nothing else. Errors: as BufferType::Alloc and
// TensorAllocator::Alloc.
absl::StatusOr<std::unique_ptr<Buffer>> AllocTensors(
    BufferType& type, absl::Span<Tensor* const> tensors,
    BufferUsage usage = BufferUsage::kAny);

}  // namespace tessera

#endif  // TESSERA_BACKEND_ALLOC_TENSOR_ALLOCATOR_H_
