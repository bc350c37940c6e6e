#include "backend/registry.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

namespace tessera {

Registry::~Registry() {
  view_.clear();
  while (!owned_.empty()) owned_.pop_back();
}

absl::Status Registry::Add(std::unique_ptr<Device> device) {
  if (device == nullptr) {
    return absl::InvalidArgumentError("[Registry::Add] null device");
  }
  if (Find(device->name()).ok()) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "[Registry::Add] a device named \"%s\" is already registered",
        device->name()));
  }
  view_.push_back(device.get());
  owned_.push_back(std::move(device));
  return absl::OkStatus();
}

absl::StatusOr<Device*> Registry::Find(std::string_view name) const {
  for (Device* device : view_) {
    if (device->name() == name) return device;
  }
  return absl::NotFoundError(
      absl::StrFormat("[Registry::Find] no device named \"%s\"", name));
}

std::vector<Device*> Registry::OfType(DeviceType type) const {
  std::vector<Device*> found;
  for (Device* device : view_) {
    if (device->Props().type == type) found.push_back(device);
  }
  return found;
}

}  // namespace tessera
