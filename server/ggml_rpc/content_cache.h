#ifndef TESSERA_SERVER_GGML_RPC_CONTENT_CACHE_H_
#define TESSERA_SERVER_GGML_RPC_CONTENT_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/decoding/buffer_range.h"

namespace tessera::server::ggml_rpc {

// ggml-rpc's content cache (rpc-server's `-c`): uploads larger than
// kMinBytes are kept in a directory as one file per content, named by the
// 16 hex digits of its FNV-1a hash (protocol.h), so that SET_TENSOR_HASH can
// place them without the bytes travelling again. A file is checked when it
// is used: one whose bytes do not hash to its name is ignored and removed.
// ggml's hash is the client's choice and only 64 bits: content is trusted
// as much as any other upload of the same connection. Thread-safe (files
// are written under a temporary name and renamed).
class ContentCache {
 public:
  // Uploads of at most this many bytes are neither kept nor offered.
  static constexpr size_t kMinBytes = size_t{10} << 20;

  explicit ContentCache(std::string dir) : dir_(std::move(dir)) {}

  // Keeps the bytes of `src` (more than kMinBytes) under their hash, read
  // from the buffer in pieces; failures are logged, not returned: the cache
  // is an optimization.
  void Put(const BufferRange& src);
  // Writes the content of `hash` to `dst` when the cache has it with the
  // range's size or less: returns the bytes written, or nullopt when the
  // cache has no such content (nothing written). Errors: a buffer's error
  // writing; FAILED_PRECONDITION when the content is larger than `dst`.
  absl::StatusOr<std::optional<size_t>> Place(uint64_t hash,
                                              const BufferRange& dst);

 private:
  std::string PathOf(uint64_t hash) const;

  const std::string dir_;
};

}  // namespace tessera::server::ggml_rpc

#endif  // TESSERA_SERVER_GGML_RPC_CONTENT_CACHE_H_
