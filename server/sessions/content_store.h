#ifndef TESSERA_SERVER_SESSIONS_CONTENT_STORE_H_
#define TESSERA_SERVER_SESSIONS_CONTENT_STORE_H_

// Content-addressed copies of uploaded bytes, by content hash
// (proto/content_hash.h), so that a second load of the same weights sends
// no bytes (WriteTensorByHash).
//
// Copies live in memory up to a byte budget, the least recently used going
// first, and, with a directory, on disk as one file per hash: a header
// (magic, size, hash) and the bytes. A file is checked when read: one that
// is short, has a wrong header, or whose bytes do not hash to its name is
// ignored and removed. Thread-safe.

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "proto/content_hash.h"
#include "server/sessions/memory_account.h"

namespace tessera::server {

class ContentStore {
 public:
  using Bytes = std::shared_ptr<const std::string>;

  // `memory_budget` 0 keeps nothing in memory; `dir` empty keeps nothing on
  // disk. What is kept in memory is also charged to `account` (the
  // daemon-wide budget; null: none): when it cannot take more, older
  // content goes first, and content it cannot fit is not kept in memory.
  ContentStore(size_t memory_budget, std::string dir,
               std::shared_ptr<MemoryAccount> account = nullptr);

  // Uploads smaller than this are not worth keeping.
  static constexpr size_t kMinBytes = size_t{1} << 20;

  // The content of `hash` with this size, or nullptr.
  Bytes Find(const wire::ContentHash& hash, size_t size);
  // Keeps `bytes`, which the caller has checked hash to `hash`.
  void Put(const wire::ContentHash& hash, Bytes bytes);

 private:
  struct Key {
    uint64_t high, low;
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.high, k.low);
    }
    bool operator==(const Key& o) const { return high == o.high && low == o.low; }
  };
  struct Entry {
    Bytes bytes;
    std::list<Key>::iterator lru;
    MemoryCharge charge;
  };

  Bytes FindInMemory(const Key& key, size_t size);
  void KeepInMemory(const Key& key, Bytes bytes);
  void EvictOldest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Bytes Load(const wire::ContentHash& hash, size_t size);
  void Save(const wire::ContentHash& hash, const std::string& bytes);
  std::string PathOf(const wire::ContentHash& hash) const;

  const size_t memory_budget_;
  const std::string dir_;
  const std::shared_ptr<MemoryAccount> account_;
  absl::Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  size_t memory_used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_CONTENT_STORE_H_
