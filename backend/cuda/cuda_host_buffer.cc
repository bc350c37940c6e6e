#include "backend/cuda/cuda_host_buffer.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_error.h"
#include "base/status_macros.h"

namespace tessera {
namespace {

size_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

}  // namespace

CudaHostBufferType::CudaHostBufferType(CudaDevice& device)
    : device_(device),
      name_(absl::StrCat(device.name(), "_host")),
      max_size_(PhysicalMemory()) {}

absl::StatusOr<std::unique_ptr<Buffer>> CudaHostBufferType::Alloc(
    size_t size) {
  if (size > max_size_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "[%s] cannot allocate %u bytes of pinned memory: the machine has %u",
        name_, size, max_size_));
  }
  TESSERA_RETURN_IF_ERROR(device_.Activate(name_));
  TESSERA_ASSIGN_OR_RETURN(
      PinnedHostMemory<> memory,
      AllocatePinnedHost(device_, size == 0 ? kAlignment : size,
                         cudaHostAllocPortable | cudaHostAllocMapped, name_));
  return std::make_unique<CudaHostBuffer>(*this, size, std::move(memory));
}

CudaHostBuffer::CudaHostBuffer(CudaHostBufferType& type, size_t size,
                               PinnedHostMemory<> memory)
    : Buffer(type, size),
      allocated_(std::move(memory)),
      data_(allocated_.get()) {}

CudaHostBuffer::CudaHostBuffer(CudaHostBufferType& type, size_t size,
                               HostRegistration registration)
    : Buffer(type, size),
      registered_(std::move(registration)),
      data_(registered_.get()) {}

absl::Status CudaHostBuffer::DoWrite(size_t offset, const void* data,
                                     size_t size) {
  std::memmove(static_cast<char*>(data_) + offset, data, size);
  return absl::OkStatus();
}

absl::Status CudaHostBuffer::DoRead(size_t offset, void* data, size_t size) {
  std::memmove(data, static_cast<const char*>(data_) + offset, size);
  return absl::OkStatus();
}

absl::Status CudaHostBuffer::DoMemset(size_t offset, uint8_t value,
                                      size_t size) {
  std::memset(static_cast<char*>(data_) + offset, value, size);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Buffer>> RegisterHostMemory(
    CudaHostBufferType& type, void* ptr, size_t size) {
  const std::string where = absl::StrCat(std::string(type.name()), " BufferFromHostPtr");
  if (ptr == nullptr || size == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s] need a non-null pointer and a size above 0 (got %p, %u)", where,
        ptr, size));
  }
  CudaDevice& device = type.cuda_device();
  TESSERA_RETURN_IF_ERROR(device.Activate(where));
  const cudaError_t error = cudaHostRegister(
      ptr, size, cudaHostRegisterPortable | cudaHostRegisterMapped);
  absl::Status s = device.Check(error, "cudaHostRegister", where);
  if (error == cudaErrorHostMemoryAlreadyRegistered ||
      error == cudaErrorInvalidValue) {
    return absl::InvalidArgumentError(s.message());
  }
  TESSERA_RETURN_IF_ERROR(s);
  return std::make_unique<CudaHostBuffer>(type, size,
                                          HostRegistration(device, ptr));
}

}  // namespace tessera
