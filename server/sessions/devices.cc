#include "server/sessions/devices.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tessera::server {
namespace {

bool IsCpu(Device* device) {
  return device->Props().type == DeviceType::kCpu;
}

}  // namespace

absl::StatusOr<std::vector<Device*>> SelectDevices(
    const Registry& registry, const std::vector<std::string>& names) {
  std::vector<Device*> devices;
  if (names.empty()) {
    devices.assign(registry.devices().begin(), registry.devices().end());
    std::stable_partition(devices.begin(), devices.end(),
                          [](Device* d) { return !IsCpu(d); });
  } else {
    for (const std::string& name : names) {
      absl::StatusOr<Device*> device = registry.Find(name);
      if (!device.ok()) {
        return absl::NotFoundError(
            absl::StrCat("devices: no device named \"", name, "\""));
      }
      if (std::find(devices.begin(), devices.end(), *device) != devices.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("devices: \"", name, "\" is listed twice"));
      }
      devices.push_back(*device);
    }
  }
  auto last_cpu = std::find_if(devices.rbegin(), devices.rend(), IsCpu);
  if (last_cpu == devices.rend()) {
    std::vector<Device*> cpus = registry.OfType(DeviceType::kCpu);
    if (cpus.empty()) {
      return absl::FailedPreconditionError(
          "devices: the server has no CPU device for the fallback");
    }
    devices.push_back(cpus.front());
  } else if (last_cpu != devices.rbegin()) {
    Device* cpu = *last_cpu;
    devices.erase(std::next(last_cpu).base());
    devices.push_back(cpu);
  }
  return devices;
}

}  // namespace tessera::server
