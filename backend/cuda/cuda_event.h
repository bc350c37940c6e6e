#ifndef TESSERA_BACKEND_CUDA_CUDA_EVENT_H_
#define TESSERA_BACKEND_CUDA_CUDA_EVENT_H_

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/cuda/cuda_handles.h"
#include "backend/cuda/kernel_error.h"
#include "backend/event.h"

namespace tessera {

class CudaDevice;

// An event of a CUDA device. Each recording is a cudaEvent_t (timing
// disabled), the recording stream's kernel error record copied into pinned,
// mapped host memory in stream order (so that streams of any GPU can read
// it), and the stream's host-side sticky status at that point; Synchronize
// waits for the latest recording and returns the first of those errors. A
// stream of any CUDA device waits for it with cudaStreamWaitEvent (WaitOn).
//
// Recordings are reused: recording again re-records the latest recording's
// cudaEvent_t in place, as CUDA does, unless a mark (Capture) still holds
// it; then a spare, or a new one, is recorded instead, so that a mark
// always waits for the recording it captured. Thread-safe.
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
  std::unique_ptr<EventMark> Capture() override;

  CudaDevice& cuda_device() { return device_; }
  // Records on `stream` (of this event's device): copies `stream_error`
  // (the stream's kernel error record, device memory) into the recording's
  // record and marks it; `stream_status` is the stream's sticky status now.
  // Errors: the CUDA errors of queuing the copy or the marker, or of making
  // a new recording.
  absl::Status Record(cudaStream_t stream,
                      const cuda_kernels::KernelError* stream_error,
                      absl::Status stream_status);
  // The latest recording, for a stream of any CUDA device to wait for with
  // cudaStreamWaitEvent and to merge `record` from in stream order. While
  // `hold` lives the recording is not recorded again, so the merge reads
  // the record of this recording.
  struct Latest {
    std::shared_ptr<const void> hold;
    cudaEvent_t event;
    const cuda_kernels::KernelError* record;
    // The recording stream's sticky status when it recorded.
    absl::Status status;
  };
  Latest latest();

 private:
  struct Recording;
  class Mark;

  CudaEvent(CudaDevice& device, std::shared_ptr<Recording> first);
  absl::StatusOr<std::shared_ptr<Recording>> NewRecording();
  // The status of the work before `recording`'s marker, once it is done.
  absl::Status Finish(Recording& recording);

  // Constant after construction.
  CudaDevice& device_;

  absl::Mutex mu_;
  // The latest recording; never null.
  std::shared_ptr<Recording> latest_ ABSL_GUARDED_BY(mu_);
  // Earlier recordings, for reuse once no mark holds them.
  std::vector<std::shared_ptr<Recording>> spare_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_EVENT_H_
