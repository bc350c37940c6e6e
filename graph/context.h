#ifndef TESSERA_GRAPH_CONTEXT_H_
#define TESSERA_GRAPH_CONTEXT_H_

#include <cstdint>
#include <deque>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/tensor.h"

namespace tessera {

// Owns tensor metadata (never tensor data: allocators and buffers hold that).
// Pointers returned stay valid for the Context's lifetime. Not thread-safe.
class Context {
 public:
  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // A new contiguous tensor of `type` with up to 4 dimensions (missing ones
  // are 1). Errors: INVALID_ARGUMENT for a negative dimension, more than 4
  // dimensions, ne[0] not a multiple of the type's block size, or a size
  // that overflows.
  absl::StatusOr<Tensor*> NewTensor(Type type, absl::Span<const int64_t> ne);

  // A copy of `proto`'s metadata (type, shape, strides, op, params, sources,
  // view, name, flags); data and buffer are not copied.
  Tensor* NewTensorLike(const Tensor& proto);

  size_t size() const { return tensors_.size(); }

 private:
  std::deque<Tensor> tensors_;
};

}  // namespace tessera

#endif  // TESSERA_GRAPH_CONTEXT_H_
