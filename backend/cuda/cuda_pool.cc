#include "backend/cuda/cuda_pool.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

// `size` rounded up to a multiple of `unit` (a power of two), or 0 when
// that overflows.
size_t RoundUp(size_t size, size_t unit) {
  if (size > std::numeric_limits<size_t>::max() - (unit - 1)) return 0;
  return (size + unit - 1) & ~(unit - 1);
}

}  // namespace

CudaPool::CudaPool(std::string name, size_t limit, ChunkSource& source,
                   size_t chunk_size)
    : name_(std::move(name)),
      limit_(limit),
      source_(source),
      chunk_size_(std::max(RoundUp(chunk_size, kChunkGranularity),
                           kChunkGranularity)) {}

CudaPool::~CudaPool() {
  absl::MutexLock lock(&mu_);
  if (!ranges_.empty()) {
    spdlog::error("[{}] destroyed with {} ranges ({} bytes) still allocated",
                  name_, ranges_.size(), in_use_);
  }
}

absl::StatusOr<void*> CudaPool::Allocate(size_t size) {
  const size_t rounded = RoundUp(std::max<size_t>(size, 1), kAlignment);
  if (rounded == 0 || rounded > limit_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "[%s] cannot allocate %u bytes: the device has %u bytes in all",
        name_, size, limit_));
  }
  absl::MutexLock lock(&mu_);
  Chunk* chunk = nullptr;
  size_t offset = 0;
  if (FindFit(rounded, &chunk, &offset)) return Take(*chunk, offset, rounded);

  const size_t whole = RoundUp(rounded, kChunkGranularity);
  if (whole == 0) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "[%s] cannot allocate %u bytes: larger than any address space", name_,
        size));
  }
  absl::StatusOr<Chunk*> added = AddChunk(std::max(chunk_size_, whole));
  if (!added.ok() && absl::IsResourceExhausted(added.status())) {
    ReleaseFreeChunks(0);
    added = AddChunk(whole);
  }
  if (!added.ok()) {
    return absl::Status(
        added.status().code(),
        absl::StrFormat("[%s] cannot allocate %u bytes (%u bytes in %u chunks "
                        "held, %u in use): %s",
                        name_, size, reserved_, chunks_.size(), in_use_,
                        added.status().message()));
  }
  return Take(**added, 0, rounded);
}

void CudaPool::Free(void* p) {
  if (p == nullptr) return;
  absl::MutexLock lock(&mu_);
  auto it = ranges_.find(reinterpret_cast<uintptr_t>(p));
  if (it == ranges_.end()) {
    spdlog::error("[{}] Free of {} which the pool did not allocate", name_, p);
    return;
  }
  Chunk& chunk = *it->second.chunk;
  size_t offset = reinterpret_cast<uintptr_t>(p) - chunk.base;
  size_t size = it->second.size;
  ranges_.erase(it);
  chunk.in_use -= size;
  in_use_ -= size;

  // Merge with the free neighbours on both sides.
  auto next = chunk.free.lower_bound(offset);
  if (next != chunk.free.end() && offset + size == next->first) {
    size += next->second;
    next = chunk.free.erase(next);
  }
  if (next != chunk.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      chunk.free.erase(prev);
    }
  }
  chunk.free.emplace(offset, size);
  if (chunk.in_use == 0) ReleaseFreeChunks(1);
}

size_t CudaPool::reserved() const {
  absl::MutexLock lock(&mu_);
  return reserved_;
}

size_t CudaPool::in_use() const {
  absl::MutexLock lock(&mu_);
  return in_use_;
}

size_t CudaPool::num_chunks() const {
  absl::MutexLock lock(&mu_);
  return chunks_.size();
}

bool CudaPool::FindFit(size_t size, Chunk** chunk, size_t* offset) {
  size_t best_size = std::numeric_limits<size_t>::max();
  uintptr_t best_address = std::numeric_limits<uintptr_t>::max();
  for (const std::unique_ptr<Chunk>& c : chunks_) {
    for (const auto& [off, free_size] : c->free) {
      if (free_size < size) continue;
      const uintptr_t address = c->base + off;
      if (free_size < best_size ||
          (free_size == best_size && address < best_address)) {
        best_size = free_size;
        best_address = address;
        *chunk = c.get();
        *offset = off;
      }
    }
  }
  return best_size != std::numeric_limits<size_t>::max();
}

void* CudaPool::Take(Chunk& chunk, size_t offset, size_t size) {
  auto it = chunk.free.find(offset);
  const size_t free_size = it->second;
  chunk.free.erase(it);
  if (free_size > size) chunk.free.emplace(offset + size, free_size - size);
  chunk.in_use += size;
  in_use_ += size;
  const uintptr_t address = chunk.base + offset;
  ranges_[address] = Range{&chunk, size};
  return reinterpret_cast<void*>(address);
}

absl::StatusOr<CudaPool::Chunk*> CudaPool::AddChunk(size_t size) {
  absl::StatusOr<void*> memory = source_.AllocateChunk(size);
  if (!memory.ok()) return memory.status();
  auto chunk = std::make_unique<Chunk>(
      Chunk{std::unique_ptr<void, ChunkFree>(*memory, ChunkFree(&source_)),
            reinterpret_cast<uintptr_t>(*memory), size});
  chunk->free.emplace(0, size);
  reserved_ += size;
  chunks_.push_back(std::move(chunk));
  return chunks_.back().get();
}

void CudaPool::ReleaseFreeChunks(size_t keep) {
  std::vector<std::unique_ptr<Chunk>> kept;
  size_t cached = 0;
  for (std::unique_ptr<Chunk>& chunk : chunks_) {
    if (chunk->in_use == 0 && (cached >= keep || chunk->size > chunk_size_)) {
      reserved_ -= chunk->size;
      chunk.reset();  // returns its memory to the source
      continue;
    }
    if (chunk->in_use == 0) ++cached;
    kept.push_back(std::move(chunk));
  }
  chunks_ = std::move(kept);
}

}  // namespace tessera
