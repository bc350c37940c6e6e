#include "backend/cuda/cuda_registry.h"

#include <memory>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "base/status_macros.h"

namespace tessera {

absl::Status AddCudaDevices(Registry& registry) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<CudaDevice>> devices,
                           CreateCudaDevices());
  for (std::unique_ptr<CudaDevice>& device : devices) {
    TESSERA_RETURN_IF_ERROR(registry.Add(std::move(device)));
  }
  return absl::OkStatus();
}

}  // namespace tessera
