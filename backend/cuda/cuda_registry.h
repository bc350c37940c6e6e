#ifndef TESSERA_BACKEND_CUDA_CUDA_REGISTRY_H_
#define TESSERA_BACKEND_CUDA_CUDA_REGISTRY_H_

#include "absl/status/status.h"
#include "backend/registry.h"

namespace tessera {

// Adds one CudaDevice per GPU found at run time (CreateCudaDevices): cuda0,
// cuda1, ... in ordinal order. A machine without GPUs or without a usable
// driver has none: that is OK (logged), not an error.
// Errors: ALREADY_EXISTS when `registry` already has a device of that name;
// UNAVAILABLE when a GPU that the driver lists cannot be opened.
absl::Status AddCudaDevices(Registry& registry);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_CUDA_REGISTRY_H_
