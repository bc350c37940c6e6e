#include "backend/device.h"

namespace tessera {

std::string_view DeviceTypeName(DeviceType type) {
  switch (type) {
    case DeviceType::kCpu:
      return "cpu";
    case DeviceType::kGpu:
      return "gpu";
    case DeviceType::kRemote:
      return "remote";
    case DeviceType::kMeta:
      return "meta";
  }
  return "unknown";
}

}  // namespace tessera
