#ifndef TESSERA_BACKEND_CUDA_CUDA_HANDLES_H_
#define TESSERA_BACKEND_CUDA_CUDA_HANDLES_H_

// Owners of CUDA driver handles and device memory, one kind each, so that
// no destructor releases a handle by hand. Each owner is move-only and
// releases what it holds exactly once: when it is destroyed or reset().
//
// Driver handles (streams, cuBLAS handles, events, graphs, graph execs,
// pinned and registered host memory) are released with their device made
// current, and only while the device is healthy: after a sticky error the
// CUDA context is gone, and the handle with it. A failed release is logged
// with spdlog and never aborts. Pool memory goes back to its CudaPool even
// on an unhealthy device (the pool is bookkeeping).
//
// Example:
//   cudaStream_t raw = nullptr;
//   TESSERA_RETURN_IF_ERROR(device.Check(cudaStreamCreate(&raw), ...));
//   CudaStreamHandle stream(device, raw);  // destroyed with `stream`

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cuda/cuda_pool.h"

namespace tessera {

class CudaDevice;

namespace cuda_handles_internal {

// Makes `device` current and runs `release` unless the device is unhealthy;
// logs a failure.
void ReleaseOnDevice(CudaDevice& device,
                     absl::FunctionRef<absl::Status()> release);

// How each kind of handle is released: the status of the driver call,
// prefixed by the device.
absl::Status DestroyStream(CudaDevice& device, cudaStream_t stream);
absl::Status DestroyCublas(CudaDevice& device, cublasHandle_t cublas);
absl::Status DestroyEvent(CudaDevice& device, cudaEvent_t event);
absl::Status DestroyGraph(CudaDevice& device, cudaGraph_t graph);
absl::Status DestroyGraphExec(CudaDevice& device, cudaGraphExec_t exec);
absl::Status UnregisterHost(CudaDevice& device, void* memory);
absl::Status FreeHost(CudaDevice& device, void* memory);
template <typename T>
absl::Status FreeHostOf(CudaDevice& device, T* memory) {
  return FreeHost(device, memory);
}

// cudaHostAlloc.
absl::StatusOr<void*> HostAlloc(CudaDevice& device, size_t size,
                                unsigned int flags, std::string_view where);

}  // namespace cuda_handles_internal

// The owner of one driver handle on one device, released with `Release`.
template <typename Handle, absl::Status (*Release)(CudaDevice&, Handle)>
class CudaOwner {
 public:
  // Owns nothing.
  CudaOwner() = default;
  // Owns `handle` (nothing if it is null) of `device`, which must outlive
  // the owner.
  CudaOwner(CudaDevice& device, Handle handle)
      : device_(&device), handle_(handle) {}
  ~CudaOwner() { reset(); }

  CudaOwner(CudaOwner&& other) noexcept
      : device_(other.device_), handle_(std::exchange(other.handle_, {})) {}
  CudaOwner& operator=(CudaOwner&& other) noexcept {
    if (this != &other) {
      reset();
      device_ = other.device_;
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  CudaOwner(const CudaOwner&) = delete;
  CudaOwner& operator=(const CudaOwner&) = delete;

  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != Handle{}; }

  // Releases the handle now (see the top of this file); owns nothing after.
  void reset() {
    if (handle_ == Handle{}) return;
    const Handle handle = std::exchange(handle_, {});
    CudaDevice& device = *device_;
    cuda_handles_internal::ReleaseOnDevice(
        device, [&device, handle] { return Release(device, handle); });
  }

 private:
  CudaDevice* device_ = nullptr;
  Handle handle_{};
};

using CudaStreamHandle =
    CudaOwner<cudaStream_t, cuda_handles_internal::DestroyStream>;
using CublasHandle =
    CudaOwner<cublasHandle_t, cuda_handles_internal::DestroyCublas>;
using CudaEventHandle =
    CudaOwner<cudaEvent_t, cuda_handles_internal::DestroyEvent>;
using CudaGraphHandle =
    CudaOwner<cudaGraph_t, cuda_handles_internal::DestroyGraph>;
using CudaGraphExecHandle =
    CudaOwner<cudaGraphExec_t, cuda_handles_internal::DestroyGraphExec>;
// Memory from cudaHostAlloc, typed as T.
template <typename T = void>
using PinnedHostMemory = CudaOwner<T*, cuda_handles_internal::FreeHostOf<T>>;
// Someone else's memory, registered with cudaHostRegister.
using HostRegistration =
    CudaOwner<void*, cuda_handles_internal::UnregisterHost>;

// `size` bytes of pinned host memory (cudaHostAlloc with `flags`) on
// `device`, which the caller has made current, typed as T. Errors: those of
// CudaDevice::Check for the call, naming `where`.
template <typename T = void>
absl::StatusOr<PinnedHostMemory<T>> AllocatePinnedHost(CudaDevice& device,
                                                       size_t size,
                                                       unsigned int flags,
                                                       std::string_view where) {
  absl::StatusOr<void*> p =
      cuda_handles_internal::HostAlloc(device, size, flags, where);
  if (!p.ok()) return p.status();
  return PinnedHostMemory<T>(device, static_cast<T*>(*p));
}

// Returns a range of device memory to its pool.
class PoolFree {
 public:
  explicit PoolFree(CudaPool* pool = nullptr) : pool_(pool) {}
  void operator()(void* p) const { pool_->Free(p); }

 private:
  CudaPool* pool_;
};

// A range of pool memory, typed as T.
template <typename T = void>
using PoolMemory = std::unique_ptr<T, PoolFree>;

// `size` bytes from `pool`, owned. Errors: those of CudaPool::Allocate.
template <typename T = void>
absl::StatusOr<PoolMemory<T>> AllocatePool(CudaPool& pool, size_t size) {
  absl::StatusOr<void*> p = pool.Allocate(size);
  if (!p.ok()) return p.status();
  return PoolMemory<T>(static_cast<T*>(*p), PoolFree(&pool));
}

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_HANDLES_H_
