#ifndef TESSERA_BACKEND_CUDA_CUDA_STREAM_H_
#define TESSERA_BACKEND_CUDA_CUDA_STREAM_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/comm/native_cuda_stream.h"
#include "backend/cuda/cuda_graph_cache.h"
#include "backend/cuda/cuda_handles.h"
#include "backend/cuda/kernel_error.h"
#include "backend/stream.h"

namespace tessera {

class CudaDevice;

// A stream of a CUDA device: a non-blocking cudaStream_t with its own
// cuBLAS handle (and workspace), scratch memory for MUL_MAT conversions and
// a kernel error record. Contract: backend/stream.h.
//
// Errors while running come from three places, and all become the stream's
// sticky status (the first one wins):
//  - a CUDA or cuBLAS call failing when work is queued (returned at once);
//  - a kernel finding bad data (a row index out of range): it claims the
//    stream's kernel error record in device memory, which Synchronize reads
//    back and RecordEvent copies into the event;
//  - a failed event that this stream waited for: a CUDA event's record is
//    merged into this stream's record in stream order; another device's
//    event is waited for on the GPU (a kernel holds the stream until the
//    device's ForeignWaits releases it, with no CUDA thread blocked), and
//    its status goes into a record that is then merged the same way.
// Once the status is known on the host, later work is skipped (calls
// return OK and queue nothing). Work already queued when a kernel fails
// still runs; its results are unspecified and the status reports the
// failure. A sticky CUDA error (illegal address and the like) also marks
// the device unhealthy.
//
// ComputeAsync checks every node before queuing anything (INVALID_ARGUMENT
// for tensors outside this device's memory, unsupported nodes or bad
// shapes) and, with CudaDeviceOptions::graph_capture, replays repeated
// identical graphs as CUDA graphs (CudaGraphCache). Growing the scratch
// memory for a larger graph waits for the stream first.
//
// Copies: host memory to and from tensors with cudaMemcpyAsync (pageable
// memory makes the call wait for the copy; pinned memory does not);
// tensor to tensor on this GPU, from another GPU peer to peer when the
// hardware allows (cudaMemcpyPeerAsync, which the driver stages through
// pinned host memory otherwise), and from page-locked host buffers
// (CudaHostBufferType). From pageable host buffers (a CPU device's) it is
// UNIMPLEMENTED: cudaMemcpyAsync reads pageable memory when it is called,
// not in stream order, so it could read what another stream has yet to
// write; the scheduler copies those synchronously.
//
// NativeCudaStream: collectives (NcclCommunicator) enqueue their work on
// handle(), in order with the stream's own, and fail the stream through
// Fail.
class CudaStream final : public Stream, public NativeCudaStream {
 public:
  // Errors: FAILED_PRECONDITION for an unhealthy device; RESOURCE_EXHAUSTED
  // and the CUDA or cuBLAS errors of creating the stream's resources.
  static absl::StatusOr<std::unique_ptr<CudaStream>> Create(
      CudaDevice& device);
  // Waits for queued work, then frees everything.
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device& device() override;
  absl::Status SetTensorAsync(Tensor& t, const void* data, size_t offset,
                              size_t size) override;
  absl::Status GetTensorAsync(const Tensor& t, void* data, size_t offset,
                              size_t size) override;
  absl::Status CopyTensorAsync(const Tensor& src, Tensor& dst) override;
  absl::Status ComputeAsync(const Graph& graph) override;
  absl::Status Synchronize() override;
  absl::Status RecordEvent(Event& event) override;
  absl::Status WaitEvent(Event& event) override;

  cudaStream_t handle() const { return stream_.get(); }
  // NativeCudaStream.
  CUstream_st* cuda_stream() override { return stream_.get(); }
  int cuda_ordinal() const override;
  // The sticky status as the host knows it.
  absl::Status status() override;
  void Fail(absl::Status status) override;
  // Whether the graph of the last ComputeAsync is captured as a CUDA graph.
  bool has_captured_graph() const { return graphs_.has_graph(); }

 private:
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

  explicit CudaStream(CudaDevice& device);
  absl::Status Init();

  // Checks that `t` is allocated in this device's memory, inside its
  // buffer.
  absl::Status CheckTensor(const Tensor& t, std::string_view where) const;
  absl::Status CheckRange(const Tensor& t, const void* data, size_t offset,
                          size_t size, std::string_view where) const;
  // Makes `status` sticky unless an earlier error is, and returns it.
  absl::Status MakeSticky(absl::Status status);
  // The status of a CUDA call on this stream, made sticky if it failed.
  absl::Status Queued(cudaError_t error, std::string_view call,
                      std::string_view where);
  // At least `bytes` of scratch (waits for the stream to replace it).
  absl::Status EnsureScratch(size_t bytes);
  absl::Status EnqueueNodes(const std::vector<const Tensor*>& nodes);

  // Constant after Init. Members are destroyed in reverse order: the
  // cuBLAS handle before its workspace, the stream before the memory its
  // work uses.
  CudaDevice& device_;
  PoolMemory<> cublas_workspace_;
  PoolMemory<cuda_kernels::KernelError> error_;
  PinnedHostMemory<cuda_kernels::KernelError> readback_;
  PinnedHostMemory<cuda_kernels::KernelError> foreign_;  // mapped
  // The count of foreign waits released (ForeignWaits writes it; mapped).
  PinnedHostMemory<uint64_t> foreign_flag_;
  CudaStreamHandle stream_;
  CublasHandle cublas_;

  // Used by the queuing thread only.
  static constexpr size_t kMaxWaited = 64;
  // The latest recordings of CUDA events this stream waited for.
  std::deque<std::shared_ptr<const void>> waited_;
  uint64_t foreign_waits_ = 0;  // foreign waits queued
  PoolMemory<> scratch_;
  size_t scratch_size_ = 0;
  CudaGraphCache graphs_;

  // State below is protected by mu_.
  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_STREAM_H_
