#include "backend/cpu/cpu_registry.h"

#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/host_memory.h"
#include "base/status_macros.h"

namespace tessera {

absl::Status AddCpuDevices(int count, int n_threads, Registry& registry) {
  const size_t first = registry.OfType(DeviceType::kCpu).size();
  const uint64_t share = count > 0 ? UsableHostMemory() / count : 0;
  for (int i = 0; i < count; ++i) {
    CpuDeviceOptions options;
    options.name = absl::StrFormat("cpu%u", first + i);
    options.n_threads = n_threads;
    options.memory_limit = share;
    TESSERA_RETURN_IF_ERROR(
        registry.Add(std::make_unique<CpuDevice>(std::move(options))));
  }
  return absl::OkStatus();
}

}  // namespace tessera
