#include "backend/alloc/free_list.h"

#include <algorithm>
#include <iterator>

namespace tessera {

FreeList::FreeList(size_t alignment) : alignment_(alignment) {}

size_t FreeList::Round(size_t size) const {
  if (size == 0) return alignment_;
  return (size + alignment_ - 1) & ~(alignment_ - 1);
}

size_t FreeList::Alloc(size_t size) {
  size = Round(size);
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= size &&
        (best == free_.end() || it->second < best->second)) {
      best = it;
    }
  }
  if (best == free_.end()) {
    const size_t offset = end_;
    end_ += size;
    high_water_ = std::max(high_water_, end_);
    return offset;
  }
  const size_t offset = best->first;
  const size_t remaining = best->second - size;
  free_.erase(best);
  if (remaining > 0) free_.emplace(offset + size, remaining);
  return offset;
}

void FreeList::Free(size_t offset, size_t size) {
  size = Round(size);
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (offset + size == end_) {
    end_ = offset;
  } else {
    free_.emplace(offset, size);
  }
}

}  // namespace tessera
