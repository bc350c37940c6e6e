#ifndef TESSERA_BACKEND_CUDA_CUDA_POOL_H_
#define TESSERA_BACKEND_CUDA_CUDA_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tessera {

// Where a CudaPool gets its chunks: cudaMalloc/cudaFree on one GPU in
// production, host memory in tests.
class ChunkSource {
 public:
  virtual ~ChunkSource() = default;
  // `size` bytes aligned to at least 256. Errors: RESOURCE_EXHAUSTED when
  // the memory is not there; anything else for a device failure.
  virtual absl::StatusOr<void*> AllocateChunk(size_t size) = 0;
  virtual void FreeChunk(void* chunk) = 0;
};

// A sub-allocator of device memory: a few large chunks from a ChunkSource,
// carved into aligned ranges, so that buffers for each graph cost no
// cudaMalloc.
//
// Allocate(size):
//  1. Rounds `size` up to kAlignment (a size of 0 takes one unit).
//  2. Takes the smallest free range that fits, in any chunk (the lowest
//     address on ties), and splits off the rest.
//  3. When none fits, asks the source for a new chunk of
//     max(chunk_size, size rounded up to kChunkGranularity). If the source is
//     out of memory, returns the cached free chunk (see Free) and asks again
//     for exactly the rounded size.
// Free(p) returns the range and merges it with free neighbours. A chunk
// that becomes wholly free stays cached if no other chunk is and it is no
// larger than chunk_size; otherwise it goes back to the source.
//
// Thread-safe. Owns its chunks; every range must be freed before the pool
// is destroyed (destroying it returns all chunks to the source).
class CudaPool {
 public:
  static constexpr size_t kAlignment = 256;
  static constexpr size_t kChunkGranularity = size_t{2} << 20;  // 2 MiB
  static constexpr size_t kDefaultChunkSize = size_t{256} << 20;

  // `name` prefixes error messages; `limit` is the most memory there is
  // (a larger request fails at once); `source` must outlive the pool.
  CudaPool(std::string name, size_t limit, ChunkSource& source,
           size_t chunk_size = kDefaultChunkSize);
  ~CudaPool();
  CudaPool(const CudaPool&) = delete;
  CudaPool& operator=(const CudaPool&) = delete;

  // Errors: RESOURCE_EXHAUSTED naming the request when it exceeds the limit
  // or the source has no memory for it; the source's other errors.
  absl::StatusOr<void*> Allocate(size_t size);
  // `p` must come from Allocate and not be freed yet (a programmer error
  // otherwise: it is logged and ignored).
  void Free(void* p);

  // Bytes held from the source, and bytes handed out in ranges (rounded).
  size_t reserved() const;
  size_t in_use() const;
  size_t num_chunks() const;

 private:
  // Returns a chunk to the source.
  class ChunkFree {
   public:
    explicit ChunkFree(ChunkSource* source) : source_(source) {}
    void operator()(void* chunk) const { source_->FreeChunk(chunk); }

   private:
    ChunkSource* source_;
  };
  struct Chunk {
    std::unique_ptr<void, ChunkFree> memory;  // owned, freed with the chunk
    uintptr_t base;
    size_t size;
    size_t in_use = 0;
    std::map<size_t, size_t> free;  // offset -> size, no two adjacent
  };
  struct Range {
    Chunk* chunk;
    size_t size;
  };

  // The best fitting free range of at least `size` bytes, or false.
  bool FindFit(size_t size, Chunk** chunk, size_t* offset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void* Take(Chunk& chunk, size_t offset, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Chunk*> AddChunk(size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns wholly free chunks to the source, keeping at most `keep` of
  // those no larger than chunk_size_.
  void ReleaseFreeChunks(size_t keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string name_;
  const size_t limit_;
  ChunkSource& source_;
  const size_t chunk_size_;

  // State below is protected by mu_.
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Chunk>> chunks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uintptr_t, Range> ranges_ ABSL_GUARDED_BY(mu_);
  size_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  size_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_POOL_H_
