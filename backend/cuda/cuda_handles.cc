#include "backend/cuda/cuda_handles.h"

#include <string>

#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "spdlog/spdlog.h"

namespace tessera::cuda_handles_internal {
namespace {

constexpr std::string_view kWhere = "release";

}  // namespace

void ReleaseOnDevice(CudaDevice& device,
                     absl::FunctionRef<absl::Status()> release) {
  // Unhealthy: the context is gone, and the handle with it.
  if (!device.Activate(kWhere).ok()) return;
  if (absl::Status s = release(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
  }
}

absl::Status DestroyStream(CudaDevice& device, cudaStream_t stream) {
  return device.Check(cudaStreamDestroy(stream), "cudaStreamDestroy", kWhere);
}

absl::Status DestroyCublas(CudaDevice& device, cublasHandle_t cublas) {
  const absl::Status s = TESSERA_CUBLAS_STATUS(cublasDestroy(cublas));
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrFormat("[%s %s] %s", device.name(),
                                                kWhere, s.message()));
}

absl::Status DestroyEvent(CudaDevice& device, cudaEvent_t event) {
  return device.Check(cudaEventDestroy(event), "cudaEventDestroy", kWhere);
}

absl::Status DestroyGraph(CudaDevice& device, cudaGraph_t graph) {
  return device.Check(cudaGraphDestroy(graph), "cudaGraphDestroy", kWhere);
}

absl::Status DestroyGraphExec(CudaDevice& device, cudaGraphExec_t exec) {
  return device.Check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy",
                      kWhere);
}

absl::Status UnregisterHost(CudaDevice& device, void* memory) {
  return device.Check(cudaHostUnregister(memory), "cudaHostUnregister", kWhere);
}

absl::Status FreeHost(CudaDevice& device, void* memory) {
  return device.Check(cudaFreeHost(memory), "cudaFreeHost", kWhere);
}

absl::StatusOr<void*> HostAlloc(CudaDevice& device, size_t size,
                                unsigned int flags, std::string_view where) {
  void* memory = nullptr;
  const cudaError_t error = cudaHostAlloc(&memory, size, flags);
  if (absl::Status s = device.Check(error, "cudaHostAlloc", where); !s.ok()) {
    return s;
  }
  return memory;
}

}  // namespace tessera::cuda_handles_internal
