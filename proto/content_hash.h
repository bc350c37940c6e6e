#ifndef TESSERA_PROTO_CONTENT_HASH_H_
#define TESSERA_PROTO_CONTENT_HASH_H_

// The content hash that names uploaded bytes in WriteTensorByHash: XXH3-128
// of each 16 MiB block, then XXH3-128 of the blocks' hashes followed by the
// total size. Blocks make the hash parallel on the client; the daemon
// computes the same hash incrementally as chunks arrive.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xxhash.h"

namespace tessera::wire {

inline constexpr size_t kHashBlockBytes = size_t{16} << 20;

struct ContentHash {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const ContentHash& other) const {
    return high == other.high && low == other.low;
  }
  // 32 lowercase hex digits.
  std::string Hex() const;
};

// The hash of [data, data + size), blocks spread over `threads` threads.
ContentHash HashContent(const void* data, size_t size, int threads);

// The same hash over bytes given in order, in pieces of any size.
class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;

  void Update(const void* data, size_t size);
  ContentHash Finish();

 private:
  void EndBlock();

  XXH3_state_t* block_;
  size_t in_block_ = 0;
  size_t total_ = 0;
  std::vector<XXH128_hash_t> blocks_;
};

}  // namespace tessera::wire

#endif  // TESSERA_PROTO_CONTENT_HASH_H_
