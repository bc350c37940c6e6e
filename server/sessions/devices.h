#ifndef TESSERA_SERVER_SESSIONS_DEVICES_H_
#define TESSERA_SERVER_SESSIONS_DEVICES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/registry.h"

namespace tessera::server {

// The devices a graph runs on, highest priority first, in the order the
// scheduler wants them: a CPU device last as the fallback. `names` empty
// means every device of `registry` (GPUs before CPUs, registry order
// otherwise). A named list without a CPU gets the registry's first CPU
// device appended; a list whose CPU devices are not last has its last CPU
// moved to the end.
// Errors: NOT_FOUND for an unknown name; INVALID_ARGUMENT for a name listed
// twice; FAILED_PRECONDITION when the registry has no CPU device.
absl::StatusOr<std::vector<Device*>> SelectDevices(
    const Registry& registry, const std::vector<std::string>& names);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_DEVICES_H_
