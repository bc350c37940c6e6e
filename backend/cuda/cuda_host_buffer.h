#ifndef TESSERA_BACKEND_CUDA_CUDA_HOST_BUFFER_H_
#define TESSERA_BACKEND_CUDA_CUDA_HOST_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_handles.h"

namespace tessera {

// Page-locked host memory (cudaHostAlloc, portable and mapped) of one CUDA
// device: fast asynchronous copies to and from every GPU, for staging,
// inputs and outputs. The CPU reads and writes it directly (is_host).
// Thread-safe. Owned by its device; its buffers must be destroyed first.
class CudaHostBufferType final : public BufferType {
 public:
  static constexpr size_t kAlignment = 256;

  explicit CudaHostBufferType(CudaDevice& device);

  std::string_view name() const override { return name_; }
  Device& device() override { return device_; }
  // Errors: RESOURCE_EXHAUSTED when the memory cannot be allocated and
  // locked; FAILED_PRECONDITION when the device is unhealthy.
  absl::StatusOr<std::unique_ptr<Buffer>> Alloc(size_t size) override;
  size_t alignment() const override { return kAlignment; }
  size_t max_size() const override { return max_size_; }
  bool is_host() const override { return true; }

  CudaDevice& cuda_device() { return device_; }

 private:
  CudaDevice& device_;
  const std::string name_;
  const size_t max_size_;
};

// Host memory that the CUDA driver has locked: allocated here (owned, freed
// with cudaFreeHost) or registered (someone else's memory, unregistered
// with cudaHostUnregister on destruction).
class CudaHostBuffer final : public Buffer {
 public:
  // Over `size` bytes of `memory`, allocated here.
  CudaHostBuffer(CudaHostBufferType& type, size_t size,
                 PinnedHostMemory<> memory);
  // Over `size` bytes of someone else's memory at `registration.get()`.
  CudaHostBuffer(CudaHostBufferType& type, size_t size,
                 HostRegistration registration);

  void* base() override { return data_; }

 protected:
  absl::Status DoWrite(size_t offset, const void* data, size_t size) override;
  absl::Status DoRead(size_t offset, void* data, size_t size) override;
  absl::Status DoMemset(size_t offset, uint8_t value, size_t size) override;

 private:
  // One of these owns the memory, the other owns nothing.
  const PinnedHostMemory<> allocated_;
  const HostRegistration registered_;
  void* const data_;
};

// Registers `size` bytes at `ptr` with the driver and wraps them (see
// CudaDevice::BufferFromHostPtr).
absl::StatusOr<std::unique_ptr<Buffer>> RegisterHostMemory(
    CudaHostBufferType& type, void* ptr, size_t size);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_HOST_BUFFER_H_
