#ifndef TESSERA_BACKEND_REGISTRY_H_
#define TESSERA_BACKEND_REGISTRY_H_

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "backend/device.h"

namespace tessera {

// The devices of a process, by name and type (ggml_backend_reg). Owns them.
// Built at start-up, then read-only; reads are thread-safe.
class Registry {
 public:
  Registry() = default;
  // Destroys the devices in the reverse order of Add: a device built on
  // others (a meta device over members) goes before them.
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Errors: ALREADY_EXISTS for a duplicate name.
  absl::Status Add(std::unique_ptr<Device> device);

  absl::Span<Device* const> devices() const { return view_; }
  // Errors: NOT_FOUND.
  absl::StatusOr<Device*> Find(std::string_view name) const;
  std::vector<Device*> OfType(DeviceType type) const;

 private:
  std::vector<std::unique_ptr<Device>> owned_;
  std::vector<Device*> view_;
};


}  // namespace tessera

#endif  // TESSERA_BACKEND_REGISTRY_H_
