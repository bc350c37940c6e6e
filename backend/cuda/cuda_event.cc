#include "backend/cuda/cuda_event.h"

#include <cstring>
#include <string_view>
#include <utility>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "base/status_macros.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<CudaEvent>> CudaEvent::Create(
    CudaDevice& device) {
  constexpr std::string_view kWhere = "CreateEvent";
  using cuda_kernels::KernelError;
  TESSERA_RETURN_IF_ERROR(device.Activate(kWhere));
  TESSERA_ASSIGN_OR_RETURN(
      PinnedHostMemory<KernelError> record,
      AllocatePinnedHost<KernelError>(
          device, sizeof(KernelError),
          cudaHostAllocPortable | cudaHostAllocMapped, kWhere));
  std::memset(record.get(), 0, sizeof(KernelError));
  cudaEvent_t event = nullptr;
  TESSERA_RETURN_IF_ERROR(
      device.Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                   "cudaEventCreateWithFlags", kWhere));
  return std::unique_ptr<CudaEvent>(
      new CudaEvent(device, CudaEventHandle(device, event), std::move(record)));
}

CudaEvent::CudaEvent(CudaDevice& device, CudaEventHandle event,
                     PinnedHostMemory<cuda_kernels::KernelError> record)
    : device_(device), record_(std::move(record)), event_(std::move(event)) {}

Device& CudaEvent::device() { return device_; }

absl::Status CudaEvent::Synchronize() {
  TESSERA_RETURN_IF_ERROR(device_.health());
  TESSERA_RETURN_IF_ERROR(device_.Check(cudaEventSynchronize(event_.get()),
                                        "cudaEventSynchronize",
                                        "Event::Synchronize"));
  {
    absl::MutexLock lock(&mu_);
    TESSERA_RETURN_IF_ERROR(recorded_status_);
  }
  return KernelErrorStatus(*record_.get(), device_.name());
}

bool CudaEvent::IsDone() {
  const cudaError_t error = cudaEventQuery(event_.get());
  if (error == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  // Done, or failed (Synchronize reports how).
  device_.Check(error, "cudaEventQuery", "Event::IsDone").IgnoreError();
  return true;
}

void CudaEvent::SetRecordedStatus(absl::Status status) {
  absl::MutexLock lock(&mu_);
  recorded_status_ = std::move(status);
}

absl::Status CudaEvent::recorded_status() {
  absl::MutexLock lock(&mu_);
  return recorded_status_;
}

}  // namespace tessera
