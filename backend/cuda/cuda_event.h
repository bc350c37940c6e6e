#ifndef TESSERA_BACKEND_CUDA_CUDA_EVENT_H_
#define TESSERA_BACKEND_CUDA_CUDA_EVENT_H_

#include <cuda_runtime.h>

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/cuda/cuda_handles.h"
#include "backend/cuda/kernel_error.h"
#include "backend/event.h"

namespace tessera {

class CudaDevice;

// An event of a CUDA device: a cudaEvent_t (timing disabled) plus the status
// of the work before the marker. Recording (CudaStream::RecordEvent) copies
// the stream's kernel error record into this event's record (pinned,
// mapped host memory, so that streams of any GPU can read it) in stream
// order and remembers the stream's host-side sticky status; Synchronize
// waits for the marker and returns the first of those errors. A stream of
// any CUDA device waits for it with cudaStreamWaitEvent. Thread-safe.
class CudaEvent final : public Event {
 public:
  // Errors: FAILED_PRECONDITION when the device is unhealthy; the CUDA
  // errors of creating the event or its record.
  static absl::StatusOr<std::unique_ptr<CudaEvent>> Create(CudaDevice& device);
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  Device& device() override;
  absl::Status Synchronize() override;
  bool IsDone() override;

  cudaEvent_t handle() const { return event_.get(); }
  CudaDevice& cuda_device() { return device_; }
  // The error record at the latest marker (written by the recording stream).
  cuda_kernels::KernelError* record() { return record_.get(); }
  // Called by the recording stream with its sticky status at that point.
  void SetRecordedStatus(absl::Status status);
  // That status, for streams that wait for the event.
  absl::Status recorded_status();

 private:
  CudaEvent(CudaDevice& device, CudaEventHandle event,
            PinnedHostMemory<cuda_kernels::KernelError> record);

  // Constant after construction.
  CudaDevice& device_;
  const PinnedHostMemory<cuda_kernels::KernelError> record_;
  const CudaEventHandle event_;

  absl::Mutex mu_;
  absl::Status recorded_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_EVENT_H_
