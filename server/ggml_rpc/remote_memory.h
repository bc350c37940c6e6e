#ifndef TESSERA_SERVER_GGML_RPC_REMOTE_MEMORY_H_
#define TESSERA_SERVER_GGML_RPC_REMOTE_MEMORY_H_

#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/decoding/buffer_range.h"
#include "server/sessions/session.h"

namespace tessera::server::ggml_rpc {

// The "remote pointers" of one ggml-rpc connection. ggml names a buffer by
// a pointer the server returns (here: the session's buffer handle) and
// addresses tensor bytes by base + offset, with a base it asks for once.
// Bases are made up per connection, never the daemon's addresses: each
// buffer gets its own range of a virtual address space, aligned and apart
// from the others, so an address resolves to one buffer or none.
// Not thread-safe (a connection is served by one thread).
class RemoteMemory {
 public:
  explicit RemoteMemory(Session& session) : session_(session) {}

  // Records buffer `handle` of `size` bytes; returns its base address,
  // aligned to `alignment` (a power of two).
  // Errors: RESOURCE_EXHAUSTED when the virtual address space runs out.
  absl::StatusOr<uint64_t> Add(uint64_t handle, uint64_t size,
                               uint64_t alignment);
  // Errors: NOT_FOUND for a pointer this connection was not given.
  absl::StatusOr<uint64_t> Base(uint64_t remote_ptr) const;
  // Frees the buffer in the session too. Errors: NOT_FOUND as Base.
  absl::Status Free(uint64_t remote_ptr);
  // The checked range of `size` bytes at address `data` + `offset` of buffer
  // `remote_ptr`. Errors: NOT_FOUND as Base; INVALID_ARGUMENT for an address
  // before the buffer or a range past its end (overflow included).
  absl::StatusOr<BufferRange> Resolve(uint64_t remote_ptr, uint64_t data,
                                      uint64_t offset, uint64_t size) const;

 private:
  Session& session_;
  // Buffer handle -> base address.
  absl::flat_hash_map<uint64_t, uint64_t> bases_;
  // The next free virtual address.
  uint64_t next_ = uint64_t{1} << 40;
};

}  // namespace tessera::server::ggml_rpc

#endif  // TESSERA_SERVER_GGML_RPC_REMOTE_MEMORY_H_
