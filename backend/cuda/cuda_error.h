#ifndef TESSERA_BACKEND_CUDA_CUDA_ERROR_H_
#define TESSERA_BACKEND_CUDA_CUDA_ERROR_H_

// CUDA runtime and cuBLAS return codes as absl::Status values.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string_view>

#include "absl/status/status.h"
#include "backend/cuda/kernel_error.h"

namespace tessera {

// OK for cudaSuccess; otherwise a status whose message names `call` and
// the error: "cudaMalloc(&p, size) failed: out of memory
// (cudaErrorMemoryAllocation)". Codes: RESOURCE_EXHAUSTED for allocation
// failures, UNAVAILABLE for a missing device or driver, INTERNAL otherwise.
absl::Status CudaStatus(cudaError_t error, std::string_view call);

// The same for cuBLAS: "cublasGemmEx(...) failed:
// CUBLAS_STATUS_EXECUTION_FAILED". RESOURCE_EXHAUSTED for
// CUBLAS_STATUS_ALLOC_FAILED, INTERNAL otherwise.
absl::Status CublasStatus(cublasStatus_t status, std::string_view call);

// Whether `error` leaves the CUDA context unusable: every later call of the
// process on that device fails (an illegal address, a kernel fault, an
// uncorrectable ECC error). Such errors mark a device unhealthy.
bool IsStickyCudaError(cudaError_t error);

// The status a kernel error record stands for: OK when it holds none,
// INVALID_ARGUMENT for a row index out of range, and the recorded code and
// message for a failed event of another device. Messages start with
// "[<device>] ".
absl::Status KernelErrorStatus(const cuda_kernels::KernelError& error,
                               std::string_view device);

}  // namespace tessera

// The status of a CUDA runtime call, naming the call's source text.
#define TESSERA_CUDA_STATUS(expr) ::tessera::CudaStatus((expr), #expr)
// The status of a cuBLAS call, naming the call's source text.
#define TESSERA_CUBLAS_STATUS(expr) ::tessera::CublasStatus((expr), #expr)

#endif  // TESSERA_BACKEND_CUDA_CUDA_ERROR_H_
