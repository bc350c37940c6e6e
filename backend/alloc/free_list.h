#ifndef TESSERA_BACKEND_ALLOC_FREE_LIST_H_
#define TESSERA_BACKEND_ALLOC_FREE_LIST_H_

#include <cstddef>
#include <map>

namespace tessera {

// Plans byte ranges in a buffer whose size is not known yet
// (ggml_dyn_tallocr): ranges are handed out from free blocks or from the end
// of the space used so far, and high_water() is the buffer size the ranges
// need. Every size is rounded up to `alignment` (a size of 0 to one
// `alignment`), so ranges are never empty and every offset is a multiple of
// `alignment`.
//
// Alloc takes the smallest free block that fits (the lowest such on ties)
// and, when none fits, extends the used space. Free merges the range with
// adjacent free blocks; a free block that reaches the end of the used space
// shrinks it instead, so it can be extended from there.
//
// Offsets and sizes are the caller's to keep consistent: each Free must
// name a range returned by Alloc (with the same size), once.
// Not thread-safe.
class FreeList {
 public:
  // `alignment` is a power of two.
  explicit FreeList(size_t alignment);

  // The offset of a new range of at least `size` bytes.
  size_t Alloc(size_t size);
  // Returns [offset, offset + size) to the free blocks.
  void Free(size_t offset, size_t size);

  // The largest end of the used space so far.
  size_t high_water() const { return high_water_; }
  // The current end of the used space.
  size_t end() const { return end_; }
  // Number of free blocks below end().
  size_t num_free_blocks() const { return free_.size(); }

 private:
  size_t Round(size_t size) const;

  const size_t alignment_;
  // Free blocks below end_: offset -> size; disjoint and never adjacent.
  std::map<size_t, size_t> free_;
  size_t end_ = 0;
  size_t high_water_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_ALLOC_FREE_LIST_H_
