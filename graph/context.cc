#include "graph/context.h"

#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {

absl::StatusOr<Tensor*> Context::NewTensor(Type type,
                                           absl::Span<const int64_t> ne) {
  if (!IsValidType(static_cast<int32_t>(type))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[Context::NewTensor] invalid type ", static_cast<int32_t>(type)));
  }
  if (ne.size() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("[Context::NewTensor] ", ne.size(),
                     " dimensions, at most ", kMaxDims, " supported"));
  }
  Tensor t;
  t.type = type;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("[Context::NewTensor] negative dimension ", i, " in [",
                       absl::StrJoin(ne, ", "), "]"));
    }
    t.ne[i] = ne[i];
  }
  const TypeTraits& traits = Traits(type);
  if (t.ne[0] % traits.block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("[Context::NewTensor] ne[0] = ", t.ne[0],
                     " is not a multiple of the block size ", traits.block_size,
                     " of ", std::string(traits.name)));
  }
  // The byte size of the whole tensor (and so every stride and the element
  // count) must fit in int64_t.
  int64_t bytes = 0;
  int64_t elements = t.ne[0];
  bool overflow = __builtin_mul_overflow(static_cast<int64_t>(traits.type_size),
                                         t.ne[0] / traits.block_size, &bytes);
  for (int i = 1; i < kMaxDims && !overflow; ++i) {
    overflow = __builtin_mul_overflow(bytes, t.ne[i], &bytes) ||
               __builtin_mul_overflow(elements, t.ne[i], &elements);
  }
  if (overflow) {
    return absl::InvalidArgumentError(
        absl::StrCat("[Context::NewTensor] size of ", std::string(traits.name),
                     " [", absl::StrJoin(t.ne, ", "), "] overflows"));
  }
  ContiguousStrides(type, t.ne, t.nb);
  tensors_.push_back(std::move(t));
  return &tensors_.back();
}

Tensor* Context::NewTensorLike(const Tensor& proto) {
  tensors_.push_back(proto);
  Tensor* t = &tensors_.back();
  t->data = nullptr;
  t->buffer = nullptr;
  return t;
}

}  // namespace tessera
