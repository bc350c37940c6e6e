#include "backend/cuda/cuda_buffer.h"

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_error.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

class CudaChunkSource final : public ChunkSource {
 public:
  explicit CudaChunkSource(CudaDevice& device) : device_(device) {}

  absl::StatusOr<void*> AllocateChunk(size_t size) override {
    TESSERA_RETURN_IF_ERROR(device_.Activate("cudaMalloc"));
    void* p = nullptr;
    const cudaError_t error = cudaMalloc(&p, size);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it for later launches
      size_t free = 0;
      size_t total = 0;
      cudaMemGetInfo(&free, &total);
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cudaMalloc of %u bytes failed: out of memory (%u of %u bytes free)",
          size, free, total));
    }
    TESSERA_RETURN_IF_ERROR(device_.Check(error, "cudaMalloc", "pool"));
    return p;
  }

  void FreeChunk(void* chunk) override {
    if (!device_.health().ok()) return;  // the context is gone
    if (absl::Status s = device_.Activate("cudaFree"); !s.ok()) return;
    absl::Status s = device_.Check(cudaFree(chunk), "cudaFree", "pool");
    if (!s.ok()) spdlog::error("{}", std::string(s.message()));
  }

 private:
  CudaDevice& device_;
};

}  // namespace

std::unique_ptr<ChunkSource> MakeCudaChunkSource(CudaDevice& device) {
  return std::make_unique<CudaChunkSource>(device);
}

CudaBufferType::CudaBufferType(CudaDevice& device, size_t memory_total)
    : device_(device), memory_total_(memory_total) {}

absl::StatusOr<std::unique_ptr<Buffer>> CudaBufferType::Alloc(size_t size) {
  TESSERA_RETURN_IF_ERROR(device_.health());
  TESSERA_ASSIGN_OR_RETURN(PoolMemory<> data,
                           AllocatePool(device_.pool(), size));
  return std::make_unique<CudaBuffer>(*this, size, std::move(data));
}

CudaBuffer::CudaBuffer(CudaBufferType& type, size_t size, PoolMemory<> data)
    : Buffer(type, size), cuda_type_(type), data_(std::move(data)) {}

// cudaMemcpy from pageable memory may return before the data reaches the
// device (it returns once the data is staged), so writes wait for the
// legacy default stream that it runs on.
absl::Status CudaBuffer::DoWrite(size_t offset, const void* data,
                                 size_t size) {
  CudaDevice& device = cuda_device();
  constexpr std::string_view kWhere = "CudaBuffer::Write";
  TESSERA_RETURN_IF_ERROR(device.Activate(kWhere));
  TESSERA_RETURN_IF_ERROR(
      device.Check(cudaMemcpy(static_cast<char*>(data_.get()) + offset, data,
                              size, cudaMemcpyHostToDevice),
                   "cudaMemcpy", kWhere));
  return device.Check(cudaStreamSynchronize(cudaStreamLegacy),
                      "cudaStreamSynchronize", kWhere);
}

absl::Status CudaBuffer::DoRead(size_t offset, void* data, size_t size) {
  CudaDevice& device = cuda_device();
  TESSERA_RETURN_IF_ERROR(device.Activate("CudaBuffer::Read"));
  return device.Check(cudaMemcpy(data, static_cast<char*>(data_.get()) + offset,
                                 size, cudaMemcpyDeviceToHost),
                      "cudaMemcpy", "CudaBuffer::Read");
}

// cudaMemset and device-to-device copies return before they finish; they
// run on the legacy default stream, which CudaStreams (non-blocking) do not
// wait for, and are waited for here.
absl::Status CudaBuffer::DoMemset(size_t offset, uint8_t value, size_t size) {
  CudaDevice& device = cuda_device();
  constexpr std::string_view kWhere = "CudaBuffer::Memset";
  TESSERA_RETURN_IF_ERROR(device.Activate(kWhere));
  TESSERA_RETURN_IF_ERROR(
      device.Check(cudaMemsetAsync(static_cast<char*>(data_.get()) + offset,
                                   value, size, cudaStreamLegacy),
                   "cudaMemsetAsync", kWhere));
  return device.Check(cudaStreamSynchronize(cudaStreamLegacy),
                      "cudaStreamSynchronize", kWhere);
}

absl::StatusOr<bool> CudaBuffer::CopyFrom(const Tensor& src, Tensor& dst) {
  CudaDevice* src_device = CudaDeviceOf(src);
  if (src_device == nullptr) return Buffer::CopyFrom(src, dst);
  constexpr std::string_view kWhere = "CudaBuffer::CopyFrom";
  TESSERA_ASSIGN_OR_RETURN(const size_t dst_offset, OffsetOf(dst));
  TESSERA_ASSIGN_OR_RETURN(const size_t src_offset, src.buffer->OffsetOf(src));
  const size_t bytes = dst.NumBytes();
  if (src.NumBytes() != bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s] source %s has %u bytes, destination %s has %u", kWhere,
        Describe(src), src.NumBytes(), Describe(dst), bytes));
  }
  if (bytes == 0) return true;
  CudaDevice& device = cuda_device();
  TESSERA_RETURN_IF_ERROR(src_device->health());
  TESSERA_RETURN_IF_ERROR(device.Activate(kWhere));
  device.EnablePeerAccess(src_device->ordinal());
  char* to = static_cast<char*>(data_.get()) + dst_offset;
  const char* from = static_cast<const char*>(src.buffer->base()) + src_offset;
  TESSERA_RETURN_IF_ERROR(device.Check(
      cudaMemcpyPeerAsync(to, device.ordinal(), from, src_device->ordinal(),
                          bytes, cudaStreamLegacy),
      "cudaMemcpyPeerAsync", kWhere));
  TESSERA_RETURN_IF_ERROR(device.Check(cudaStreamSynchronize(cudaStreamLegacy),
                                       "cudaStreamSynchronize", kWhere));
  return true;
}

}  // namespace tessera
