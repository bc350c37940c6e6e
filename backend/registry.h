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

// Adds the devices named by `spec` to `registry`. A spec is a comma-separated
// list of items:
//   "cpu"      one CPU device with `cpu_threads` threads
//   "cpu:N"    N CPU devices cpu0..cpuN-1, each with its own threads
//   "cuda"     every CUDA GPU found (none is not an error)
//   "all"      every GPU found, and one CPU device
// Errors: INVALID_ARGUMENT for an unknown item or a bad count.
absl::Status AddDevices(std::string_view spec, int cpu_threads,
                        Registry& registry);

}  // namespace tessera

#endif  // TESSERA_BACKEND_REGISTRY_H_
