#include "backend/cpu/cpu_buffer.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "backend/cpu/host_memory.h"
#include "backend/cpu/host_pages.h"

namespace tessera {

CpuBufferType::CpuBufferType(CpuDevice& device)
    : device_(device), name_(device.name()) {}

absl::StatusOr<std::unique_ptr<Buffer>> CpuBufferType::Alloc(size_t size) {
  // 1. Whole alignment units, at least one, so that base() is never null.
  if (size > std::numeric_limits<size_t>::max() - kAlignment) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "[%s] cannot allocate %u bytes: larger than any address space", name_,
        size));
  }
  const size_t rounded =
      size == 0 ? kAlignment
                : (size + kAlignment - 1) / kAlignment * kAlignment;

  // 2. Reserve `size` bytes in the device's accounting.
  const size_t total = device_.memory_total_;
  size_t used = device_.used_.load();
  do {
    if (size > total - used) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "[%s] cannot allocate %u bytes: %u of %u bytes available", name_,
          size, total - used, total));
    }
  } while (!device_.used_.compare_exchange_weak(used, used + size));

  // 3. Refuse what the host cannot back now (other processes, the cgroup,
  //    rlimits), rather than let the kernel kill the process later. Smaller
  //    allocations come out of the eighth kept for the process (reading
  //    the limits costs about 0.1 ms).
  constexpr size_t kCheckedBytes = size_t{4} << 20;
  if (const uint64_t room =
          rounded >= kCheckedBytes ? HostMemoryRoom() : UINT64_MAX;
      rounded > room) {
    Release(size);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "[%s] cannot allocate %u bytes: the host can back only %u more "
        "(available memory, cgroup and rlimits)",
        name_, size, room));
  }

  // 4. Allocate; on failure give the reservation back.
  HostPages data = AllocHostPages(rounded);
  if (data == nullptr) {
    Release(size);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "[%s] the system could not allocate %u bytes (%u of %u bytes "
        "available to the device)",
        name_, size, total - device_.used_.load(), total));
  }
  return std::make_unique<CpuBuffer>(*this, size, std::move(data));
}

void CpuBufferType::Release(size_t size) { device_.used_.fetch_sub(size); }

CpuBuffer::CpuBuffer(CpuBufferType& type, size_t size, HostPages data)
    : Buffer(type, size), cpu_type_(type), data_(std::move(data)) {}

CpuBuffer::~CpuBuffer() { cpu_type_.Release(size()); }

// memmove: a copy between two tensors of one buffer may overlap.
absl::Status CpuBuffer::DoWrite(size_t offset, const void* data, size_t size) {
  std::memmove(static_cast<char*>(base()) + offset, data, size);
  return absl::OkStatus();
}

absl::Status CpuBuffer::DoRead(size_t offset, void* data, size_t size) {
  std::memmove(data, static_cast<const char*>(base()) + offset, size);
  return absl::OkStatus();
}

absl::Status CpuBuffer::DoMemset(size_t offset, uint8_t value, size_t size) {
  std::memset(static_cast<char*>(base()) + offset, value, size);
  return absl::OkStatus();
}

}  // namespace tessera
