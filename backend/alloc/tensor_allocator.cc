#include "backend/alloc/tensor_allocator.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tessera {
namespace {

// Bytes from `offset` to the next offset whose address in a buffer based at
// `base` is a multiple of `alignment` (a power of two).
size_t AlignedOffset(const void* base, size_t offset, size_t alignment) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(base) + offset;
  const uintptr_t aligned = (address + alignment - 1) & ~(alignment - 1);
  return offset + (aligned - address);
}

// Sets the data of every view in `views` (none with data) from its source,
// sources first when they are views themselves.
// Errors: FAILED_PRECONDITION for a view whose source never gets data.
absl::Status InitViews(std::vector<Tensor*> views) {
  while (!views.empty()) {
    const size_t before = views.size();
    std::erase_if(views, [](Tensor* view) {
      // InitView cannot fail once the source has data.
      return view->view_src->data != nullptr && InitView(*view).ok();
    });
    if (views.size() == before) return InitView(*views.front());
  }
  return absl::OkStatus();
}

}  // namespace

TensorAllocator::TensorAllocator(Buffer& buffer) : buffer_(buffer) {}

absl::Status TensorAllocator::Alloc(Tensor& t) {
  if (t.data != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[TensorAllocator::Alloc] ", Describe(t), " already has data"));
  }
  if (t.IsView()) return InitView(t);
  BufferType& type = buffer_.type();
  const size_t size = type.AllocSize(t);
  const size_t offset =
      AlignedOffset(buffer_.base(), offset_, type.alignment());
  if (offset > buffer_.size() || size > buffer_.size() - offset) {
    return absl::ResourceExhaustedError(
        absl::StrCat("[TensorAllocator::Alloc] ", Describe(t), " needs ", size,
                     " bytes at offset ", offset, " of a buffer of ",
                     buffer_.size(), " bytes"));
  }
  t.data = static_cast<char*>(buffer_.base()) + offset;
  t.buffer = &buffer_;
  offset_ = offset + size;
  return absl::OkStatus();
}

absl::Status InitView(Tensor& view) {
  if (view.view_src == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("[InitView] ", Describe(view), " is not a view"));
  }
  const Tensor& src = *view.view_src;
  if (src.data == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("[InitView] view ", Describe(view), " of ", Describe(src),
                     ": the source has no data"));
  }
  view.data = static_cast<char*>(src.data) + view.view_offs;
  view.buffer = src.buffer;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Buffer>> AllocTensors(
    BufferType& type, absl::Span<Tensor* const> tensors, BufferUsage usage) {
  // Places every distinct non-view tensor without data at the alignment, as
  // TensorAllocator places them in a buffer whose base is aligned.
  const size_t alignment = type.alignment();
  absl::flat_hash_set<const Tensor*> seen;
  std::vector<TensorPlacement> placements;
  size_t total = 0;
  for (const Tensor* t : tensors) {
    if (t->data != nullptr || t->IsView() || !seen.insert(t).second) continue;
    const size_t size = type.AllocSize(*t);
    const size_t padded = (size + alignment - 1) & ~(alignment - 1);
    if (padded < size || padded > SIZE_MAX - total) {
      return absl::ResourceExhaustedError(
          absl::StrCat("[AllocTensors] the tensors' total size overflows at ",
                       Describe(*t)));
    }
    placements.push_back({t, total});
    total += padded;
  }
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      usage == BufferUsage::kWeights ? type.AllocPlaced(total, placements)
                                     : type.Alloc(total);
  if (!buffer.ok()) return buffer.status();
  (*buffer)->set_usage(usage);

  // Places sources, then views; on an error, takes back what it gave.
  TensorAllocator allocator(**buffer);
  std::vector<Tensor*> placed;
  std::vector<Tensor*> views;
  absl::Status status;
  for (Tensor* t : tensors) {
    if (t->data != nullptr) continue;
    if (t->IsView()) {
      if (seen.insert(t).second) views.push_back(t);
      continue;
    }
    status = allocator.Alloc(*t);
    if (!status.ok()) break;
    placed.push_back(t);
    // AllocPlaced was promised these offsets.
    const size_t offset =
        static_cast<char*>(t->data) - static_cast<char*>((*buffer)->base());
    if (offset != placements[placed.size() - 1].offset) {
      status = absl::InternalError(absl::StrCat(
          "[AllocTensors] ", Describe(*t), " placed at ", offset,
          " instead of ", placements[placed.size() - 1].offset,
          ": the buffer's base is not aligned"));
      break;
    }
  }
  if (status.ok()) {
    placed.insert(placed.end(), views.begin(), views.end());
    status = InitViews(std::move(views));
  }
  if (!status.ok()) {
    for (Tensor* t : placed) {
      t->data = nullptr;
      t->buffer = nullptr;
    }
    return status;
  }
  return buffer;
}

}  // namespace tessera
