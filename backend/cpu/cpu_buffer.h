#ifndef TESSERA_BACKEND_CPU_CPU_BUFFER_H_
#define TESSERA_BACKEND_CPU_CPU_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/host_pages.h"

namespace tessera {

// Host memory of one CpuDevice, 64-byte aligned, large buffers on huge
// pages (host_pages.h). Allocations count against the device's
// memory_limit (or physical RAM). Thread-safe. Owned by its device; its
// buffers must be destroyed before the device.
class CpuBufferType final : public BufferType {
 public:
  static constexpr size_t kAlignment = 64;

  explicit CpuBufferType(CpuDevice& device);

  std::string_view name() const override { return name_; }
  Device& device() override { return device_; }
  // Errors: RESOURCE_EXHAUSTED naming the requested and available bytes
  // when the device's memory accounting or the system allocator refuses.
  absl::StatusOr<std::unique_ptr<Buffer>> Alloc(size_t size) override;
  size_t alignment() const override { return kAlignment; }
  size_t max_size() const override { return device_.memory_total_; }
  bool is_host() const override { return true; }

  // Returns `size` bytes to the device's accounting (called by CpuBuffer).
  void Release(size_t size);

 private:
  CpuDevice& device_;
  const std::string name_;
};

// A block of host memory from a CpuBufferType; frees it and returns it to the
// device's accounting on destruction.
class CpuBuffer final : public Buffer {
 public:
  // Takes `data` (at least max(size, 1) bytes).
  CpuBuffer(CpuBufferType& type, size_t size, HostPages data);
  ~CpuBuffer() override;

  void* base() override { return data_.get(); }

 protected:
  absl::Status DoWrite(size_t offset, const void* data, size_t size) override;
  absl::Status DoRead(size_t offset, void* data, size_t size) override;
  absl::Status DoMemset(size_t offset, uint8_t value, size_t size) override;

 private:
  CpuBufferType& cpu_type_;
  HostPages data_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_BUFFER_H_
