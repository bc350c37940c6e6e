#include "backend/cuda/cuda_event.h"

#include <cstring>
#include <string_view>
#include <utility>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "base/status_macros.h"

namespace tessera {
namespace {

using cuda_kernels::KernelError;

// Spare recordings kept for reuse beyond those that marks hold.
constexpr size_t kMaxSpare = 4;

}  // namespace

struct CudaEvent::Recording {
  CudaEventHandle event;
  PinnedHostMemory<KernelError> record;  // mapped
  // The recording stream's sticky status when it recorded; written under
  // the event's mutex while no mark holds the recording.
  absl::Status status;
};

// Waits for one recording; holding it keeps it from being recorded again.
class CudaEvent::Mark final : public EventMark {
 public:
  Mark(CudaEvent& event, std::shared_ptr<Recording> recording)
      : event_(event), recording_(std::move(recording)) {}
  absl::Status Wait() override {
    TESSERA_RETURN_IF_ERROR(event_.device_.health());
    TESSERA_RETURN_IF_ERROR(event_.device_.Check(
        cudaEventSynchronize(recording_->event.get()), "cudaEventSynchronize",
        "EventMark::Wait"));
    return event_.Finish(*recording_);
  }
  bool IsDone() override {
    const cudaError_t error = cudaEventQuery(recording_->event.get());
    if (error == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    // Done, or failed (Wait reports how).
    event_.device_.Check(error, "cudaEventQuery", "EventMark::IsDone")
        .IgnoreError();
    return true;
  }

 private:
  CudaEvent& event_;
  const std::shared_ptr<Recording> recording_;
};

absl::StatusOr<std::unique_ptr<CudaEvent>> CudaEvent::Create(
    CudaDevice& device) {
  TESSERA_RETURN_IF_ERROR(device.Activate("CreateEvent"));
  std::unique_ptr<CudaEvent> event(new CudaEvent(device, nullptr));
  absl::MutexLock lock(&event->mu_);
  TESSERA_ASSIGN_OR_RETURN(event->latest_, event->NewRecording());
  return event;
}

CudaEvent::CudaEvent(CudaDevice& device, std::shared_ptr<Recording> first)
    : device_(device), latest_(std::move(first)) {}

absl::StatusOr<std::shared_ptr<CudaEvent::Recording>>
CudaEvent::NewRecording() {
  constexpr std::string_view kWhere = "CreateEvent";
  TESSERA_ASSIGN_OR_RETURN(
      PinnedHostMemory<KernelError> record,
      AllocatePinnedHost<KernelError>(
          device_, sizeof(KernelError),
          cudaHostAllocPortable | cudaHostAllocMapped, kWhere));
  std::memset(record.get(), 0, sizeof(KernelError));
  cudaEvent_t event = nullptr;
  TESSERA_RETURN_IF_ERROR(
      device_.Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                    "cudaEventCreateWithFlags", kWhere));
  return std::make_shared<Recording>(
      Recording{CudaEventHandle(device_, event), std::move(record), {}});
}

Device& CudaEvent::device() { return device_; }

absl::Status CudaEvent::Synchronize() { return Capture()->Wait(); }

bool CudaEvent::IsDone() { return Capture()->IsDone(); }

std::unique_ptr<EventMark> CudaEvent::Capture() {
  absl::MutexLock lock(&mu_);
  return std::make_unique<Mark>(*this, latest_);
}

absl::Status CudaEvent::Finish(Recording& recording) {
  {
    absl::MutexLock lock(&mu_);
    TESSERA_RETURN_IF_ERROR(recording.status);
  }
  return KernelErrorStatus(*recording.record.get(), device_.name());
}

absl::Status CudaEvent::Record(cudaStream_t stream,
                               const KernelError* stream_error,
                               absl::Status stream_status) {
  constexpr std::string_view kWhere = "CudaStream::RecordEvent";
  absl::MutexLock lock(&mu_);
  // use_count 1: only this event holds it, no mark waits for it.
  if (latest_.use_count() > 1) {
    std::shared_ptr<Recording> next;
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->use_count() == 1) {
        next = std::move(*it);
        spare_.erase(it);
        break;
      }
    }
    if (next == nullptr) {
      TESSERA_ASSIGN_OR_RETURN(next, NewRecording());
    }
    spare_.push_back(std::exchange(latest_, std::move(next)));
    while (spare_.size() > kMaxSpare && spare_.front().use_count() == 1) {
      spare_.erase(spare_.begin());
    }
  }
  Recording& recording = *latest_;
  TESSERA_RETURN_IF_ERROR(device_.Check(
      cudaMemcpyAsync(recording.record.get(), stream_error,
                      sizeof(KernelError), cudaMemcpyDeviceToHost, stream),
      "cudaMemcpyAsync", kWhere));
  TESSERA_RETURN_IF_ERROR(
      device_.Check(cudaEventRecord(recording.event.get(), stream),
                    "cudaEventRecord", kWhere));
  recording.status = std::move(stream_status);
  return absl::OkStatus();
}

CudaEvent::Latest CudaEvent::latest() {
  absl::MutexLock lock(&mu_);
  return {latest_, latest_->event.get(), latest_->record.get(),
          latest_->status};
}

}  // namespace tessera
