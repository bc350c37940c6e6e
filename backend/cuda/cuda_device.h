#ifndef TESSERA_BACKEND_CUDA_CUDA_DEVICE_H_
#define TESSERA_BACKEND_CUDA_CUDA_DEVICE_H_

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/cuda/cuda_pool.h"
#include "backend/cuda/foreign_waits.h"
#include "backend/device.h"

namespace tessera {

class CudaBufferType;
class CudaHostBufferType;

struct CudaDeviceOptions {
  // CUDA device ordinal (0 .. cudaGetDeviceCount() - 1).
  int ordinal = 0;
  // Registry name; empty means "cuda<ordinal>".
  std::string name;
  // Replay a graph computed unchanged several times in a row as a CUDA graph
  // (see CudaGraphCache).
  bool graph_capture = true;
  // Size of the chunks the device memory pool takes from cudaMalloc.
  size_t pool_chunk_size = CudaPool::kDefaultChunkSize;
};

// One NVIDIA GPU. Memory: buffer_type() is device memory from a pool
// (CudaPool), host_buffer_type() pinned host memory (cudaHostAlloc) for
// staging, inputs and outputs, and BufferFromHostPtr() pins existing host
// memory. Streams own a CUDA stream and a cuBLAS handle; events are CUDA
// events. Thread-safe.
//
// Health: a sticky CUDA error (one that poisons the CUDA context, such as an
// illegal address in a kernel) marks the device unhealthy. From then on
// every call that would touch the GPU returns FAILED_PRECONDITION with that
// error, and Props() says so; nothing aborts, so the process keeps serving
// its other devices.
//
// Every public method makes this device the calling thread's current CUDA
// device (cudaSetDevice) and leaves it so.
class CudaDevice final : public Device {
 public:
  // Opens the GPU `options.ordinal`. Errors: UNAVAILABLE when there is no
  // such device or no usable driver.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(
      CudaDeviceOptions options);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  const std::string& name() const override { return name_; }
  // memory_free and memory_total from cudaMemGetInfo (the last values read
  // if the device has become unhealthy).
  DeviceProps Props() override;
  BufferType& buffer_type() override;
  BufferType* host_buffer_type() override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  bool SupportsOp(const Tensor& node) const override;
  // Only this device's own device memory.
  bool SupportsBufferType(const BufferType& type) const override;

  // A host buffer over `size` bytes of existing host memory at `ptr`, which
  // is page-locked (cudaHostRegister) while the buffer lives; the caller
  // keeps the memory valid until then. Its type is host_buffer_type().
  // Errors: INVALID_ARGUMENT for a null pointer or memory that is already
  // registered; RESOURCE_EXHAUSTED when it cannot be locked.
  absl::StatusOr<std::unique_ptr<Buffer>> BufferFromHostPtr(void* ptr,
                                                            size_t size);

  int ordinal() const { return options_.ordinal; }
  const CudaDeviceOptions& options() const { return options_; }
  const cudaDeviceProp& properties() const { return properties_; }
  CudaPool& pool() { return *pool_; }
  // Where this device's streams wait for events of other kinds of devices.
  ForeignWaits& foreign_waits() { return *foreign_waits_; }

  // OK while healthy; otherwise FAILED_PRECONDITION with the first sticky
  // error.
  absl::Status health() const;
  // The status of `call` returning `error`, prefixed "[<name> <where>] ";
  // a sticky error marks the device unhealthy.
  absl::Status Check(cudaError_t error, std::string_view call,
                     std::string_view where);
  // Marks the device unhealthy with `status` (the first reason wins).
  void MarkUnhealthy(const absl::Status& status);
  // Makes this device current on the calling thread after checking health.
  absl::Status Activate(std::string_view where);
  // Whether this device reads `peer_ordinal`'s memory directly; enables
  // peer access the first time it is asked and possible.
  bool EnablePeerAccess(int peer_ordinal);

 private:
  CudaDevice(CudaDeviceOptions options, std::string name,
             const cudaDeviceProp& properties, size_t memory_total,
             std::unique_ptr<ForeignWaits> foreign_waits);

  // Constant after construction.
  const CudaDeviceOptions options_;
  const std::string name_;
  const cudaDeviceProp properties_;
  const size_t memory_total_;
  std::unique_ptr<ChunkSource> chunk_source_;
  std::unique_ptr<CudaPool> pool_;
  std::unique_ptr<CudaBufferType> buffer_type_;
  std::unique_ptr<CudaHostBufferType> host_buffer_type_;
  std::unique_ptr<ForeignWaits> foreign_waits_;

  std::atomic<bool> healthy_{true};
  std::atomic<size_t> last_free_{0};
  // State below is protected by mu_.
  mutable absl::Mutex mu_;
  absl::Status unhealthy_status_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, bool> peer_access_ ABSL_GUARDED_BY(mu_);
};

// The device of `t`'s buffer if that is a CUDA device buffer, else null.
CudaDevice* CudaDeviceOf(const Tensor& t);

// One device per GPU found at run time, in ordinal order, named cuda0,
// cuda1, ...; none (and OK) when there is no GPU or no usable driver.
// Errors: UNAVAILABLE when a GPU the driver lists cannot be opened.
absl::StatusOr<std::vector<std::unique_ptr<CudaDevice>>> CreateCudaDevices();

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_DEVICE_H_
