#include "proto/content_hash.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_format.h"

namespace tessera::wire {
namespace {

ContentHash Combine(const std::vector<XXH128_hash_t>& blocks, size_t size) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  for (const XXH128_hash_t& block : blocks) {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, block);
    XXH3_128bits_update(state, &canonical, sizeof(canonical));
  }
  const uint64_t total = size;
  XXH3_128bits_update(state, &total, sizeof(total));
  const XXH128_hash_t hash = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return {.high = hash.high64, .low = hash.low64};
}

}  // namespace

std::string ContentHash::Hex() const {
  return absl::StrFormat("%016x%016x", high, low);
}

ContentHash HashContent(const void* data, size_t size, int threads) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  const size_t n_blocks = (size + kHashBlockBytes - 1) / kHashBlockBytes;
  std::vector<XXH128_hash_t> blocks(n_blocks);
  auto hash_blocks = [&](size_t first, size_t step) {
    for (size_t b = first; b < n_blocks; b += step) {
      const size_t at = b * kHashBlockBytes;
      blocks[b] = XXH3_128bits(bytes + at, std::min(kHashBlockBytes, size - at));
    }
  };
  const size_t workers =
      std::clamp<size_t>(static_cast<size_t>(std::max(threads, 1)), 1,
                         std::max<size_t>(n_blocks, 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < workers; ++t) pool.emplace_back(hash_blocks, t, workers);
  hash_blocks(0, workers);
  for (std::thread& thread : pool) thread.join();
  return Combine(blocks, size);
}

ContentHasher::ContentHasher() : block_(XXH3_createState()) {
  XXH3_128bits_reset(block_);
}

ContentHasher::~ContentHasher() { XXH3_freeState(block_); }

void ContentHasher::Update(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const size_t n = std::min(size, kHashBlockBytes - in_block_);
    XXH3_128bits_update(block_, bytes, n);
    in_block_ += n;
    total_ += n;
    bytes += n;
    size -= n;
    if (in_block_ == kHashBlockBytes) EndBlock();
  }
}

void ContentHasher::EndBlock() {
  blocks_.push_back(XXH3_128bits_digest(block_));
  XXH3_128bits_reset(block_);
  in_block_ = 0;
}

ContentHash ContentHasher::Finish() {
  if (in_block_ > 0) EndBlock();
  return Combine(blocks_, total_);
}

}  // namespace tessera::wire
