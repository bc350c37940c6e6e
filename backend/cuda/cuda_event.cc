#include "backend/cuda/cuda_event.h"

#include <cstring>
#include <string>
#include <utility>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<CudaEvent>> CudaEvent::Create(
    CudaDevice& device) {
  constexpr std::string_view kWhere = "CreateEvent";
  TESSERA_RETURN_IF_ERROR(device.Activate(kWhere));
  void* record = nullptr;
  TESSERA_RETURN_IF_ERROR(device.Check(
      cudaHostAlloc(&record, sizeof(cuda_kernels::KernelError),
                    cudaHostAllocPortable | cudaHostAllocMapped),
      "cudaHostAlloc", kWhere));
  std::memset(record, 0, sizeof(cuda_kernels::KernelError));
  cudaEvent_t event = nullptr;
  if (absl::Status s =
          device.Check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                       "cudaEventCreateWithFlags", kWhere);
      !s.ok()) {
    cudaFreeHost(record);
    return s;
  }
  return std::unique_ptr<CudaEvent>(new CudaEvent(
      device, event, static_cast<cuda_kernels::KernelError*>(record)));
}

CudaEvent::CudaEvent(CudaDevice& device, cudaEvent_t event,
                     cuda_kernels::KernelError* record)
    : device_(device), event_(event), record_(record) {}

CudaEvent::~CudaEvent() {
  if (!device_.Activate("~CudaEvent").ok()) return;  // the context is gone
  absl::Status s = device_.Check(cudaEventDestroy(event_), "cudaEventDestroy",
                                 "~CudaEvent");
  if (s.ok()) {
    s = device_.Check(cudaFreeHost(record_), "cudaFreeHost", "~CudaEvent");
  }
  if (!s.ok()) spdlog::error("{}", std::string(s.message()));
}

Device& CudaEvent::device() { return device_; }

absl::Status CudaEvent::Synchronize() {
  TESSERA_RETURN_IF_ERROR(device_.health());
  TESSERA_RETURN_IF_ERROR(device_.Check(cudaEventSynchronize(event_),
                                        "cudaEventSynchronize",
                                        "Event::Synchronize"));
  {
    absl::MutexLock lock(&mu_);
    TESSERA_RETURN_IF_ERROR(recorded_status_);
  }
  return KernelErrorStatus(*record_, device_.name());
}

bool CudaEvent::IsDone() {
  const cudaError_t error = cudaEventQuery(event_);
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
