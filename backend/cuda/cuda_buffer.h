#ifndef TESSERA_BACKEND_CUDA_CUDA_BUFFER_H_
#define TESSERA_BACKEND_CUDA_CUDA_BUFFER_H_

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
#include "backend/cuda/cuda_pool.h"

namespace tessera {

// Chunks of device memory for a CudaPool: cudaMalloc / cudaFree on
// `device`. Out of memory is RESOURCE_EXHAUSTED (and clears the
// non-sticky CUDA error).
std::unique_ptr<ChunkSource> MakeCudaChunkSource(CudaDevice& device);

// Device memory of one GPU, sub-allocated from the device's CudaPool.
// Thread-safe. Owned by its device; its buffers must be destroyed first.
class CudaBufferType final : public BufferType {
 public:
  static constexpr size_t kAlignment = CudaPool::kAlignment;

  CudaBufferType(CudaDevice& device, size_t memory_total);

  std::string_view name() const override { return device_.name(); }
  Device& device() override { return device_; }
  // Errors: RESOURCE_EXHAUSTED naming the request and the device when the
  // memory is not there (the device keeps working); FAILED_PRECONDITION
  // when the device is unhealthy.
  absl::StatusOr<std::unique_ptr<Buffer>> Alloc(size_t size) override;
  size_t alignment() const override { return kAlignment; }
  size_t max_size() const override { return memory_total_; }
  bool is_host() const override { return false; }

  CudaDevice& cuda_device() { return device_; }

 private:
  CudaDevice& device_;
  const size_t memory_total_;
};

// A range of device memory from the pool, returned to it on destruction.
// The byte-range operations are synchronous (they wait for their own copy,
// not for streams); CopyFrom copies from host buffers and from device
// buffers of any GPU (peer to peer where possible).
class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(CudaBufferType& type, size_t size, PoolMemory<> data);

  void* base() override { return data_.get(); }
  CudaDevice& cuda_device() { return cuda_type_.cuda_device(); }

  absl::StatusOr<bool> CopyFrom(const Tensor& src, Tensor& dst) override;

 protected:
  absl::Status DoWrite(size_t offset, const void* data, size_t size) override;
  absl::Status DoRead(size_t offset, void* data, size_t size) override;
  absl::Status DoMemset(size_t offset, uint8_t value, size_t size) override;

 private:
  CudaBufferType& cuda_type_;
  const PoolMemory<> data_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_BUFFER_H_
