#include "backend/cuda/cuda_error.h"

#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "graph/tensor.h"

namespace tessera {

absl::Status CudaStatus(cudaError_t error, std::string_view call) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrFormat("%s failed: %s (%s)", call, cudaGetErrorString(error),
                      cudaGetErrorName(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStubLibrary:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasStatus(cublasStatus_t status, std::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message = absl::StrFormat(
      "%s failed: %s (%s)", call, cublasGetStatusString(status),
      cublasGetStatusName(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

bool IsStickyCudaError(cudaError_t error) {
  switch (error) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
    case cudaErrorSystemNotReady:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorExternalDevice:
    case cudaErrorPriorLaunchFailure:
    case cudaErrorContained:
      return true;
    default:
      return false;
  }
}

absl::Status KernelErrorStatus(const cuda_kernels::KernelError& error,
                               std::string_view device) {
  switch (error.code) {
    case cuda_kernels::kKernelOk:
      return absl::OkStatus();
    case cuda_kernels::kKernelRowIndexOutOfRange:
      return absl::InvalidArgumentError(absl::StrFormat(
          "[%s] %s: row index %d is out of range [0, %d)", device,
          OpName(static_cast<Op>(error.op)), error.value, error.limit));
    case cuda_kernels::kKernelForeignEventFailed: {
      const std::string message(error.message,
                                strnlen(error.message, sizeof(error.message)));
      const auto code = static_cast<absl::StatusCode>(error.value);
      return absl::Status(code == absl::StatusCode::kOk
                              ? absl::StatusCode::kInternal
                              : code,
                          absl::StrFormat("[%s] %s", device, message));
    }
    default:
      return absl::InternalError(absl::StrFormat(
          "[%s] unknown kernel error code %d", device, error.code));
  }
}

}  // namespace tessera
