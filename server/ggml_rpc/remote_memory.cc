#include "server/ggml_rpc/remote_memory.h"

#include "absl/strings/str_cat.h"

namespace tessera::server::ggml_rpc {
namespace {

// Room left between two buffers' ranges, so that an address just past one
// buffer is in none.
constexpr uint64_t kGap = uint64_t{1} << 20;

}  // namespace

absl::StatusOr<uint64_t> RemoteMemory::Add(uint64_t handle, uint64_t size,
                                           uint64_t alignment) {
  const uint64_t align = std::max<uint64_t>(alignment, 4096);
  const uint64_t base = (next_ + align - 1) & ~(align - 1);
  if (base < next_ || size > UINT64_MAX - kGap - base) {
    return absl::ResourceExhaustedError(
        "[ggml-rpc] the connection's address space is used up");
  }
  next_ = base + size + kGap;
  bases_[handle] = base;
  return base;
}

absl::StatusOr<uint64_t> RemoteMemory::Base(uint64_t remote_ptr) const {
  auto it = bases_.find(remote_ptr);
  if (it == bases_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "buffer 0x", absl::Hex(remote_ptr), " is not one of this connection's"));
  }
  return it->second;
}

absl::Status RemoteMemory::Free(uint64_t remote_ptr) {
  if (absl::StatusOr<uint64_t> base = Base(remote_ptr); !base.ok()) {
    return base.status();
  }
  bases_.erase(remote_ptr);
  return session_.FreeBuffer(remote_ptr);
}

absl::StatusOr<BufferRange> RemoteMemory::Resolve(uint64_t remote_ptr,
                                                  uint64_t data,
                                                  uint64_t offset,
                                                  uint64_t size) const {
  absl::StatusOr<uint64_t> base = Base(remote_ptr);
  if (!base.ok()) return base.status();
  if (data < *base || offset > UINT64_MAX - (data - *base)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address 0x", absl::Hex(data), " + ", offset, " is not in buffer 0x",
        absl::Hex(remote_ptr)));
  }
  return ResolveRange(session_, "tensor", remote_ptr, data - *base + offset,
                      size);
}

}  // namespace tessera::server::ggml_rpc
