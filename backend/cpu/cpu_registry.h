#ifndef TESSERA_BACKEND_CPU_CPU_REGISTRY_H_
#define TESSERA_BACKEND_CPU_CPU_REGISTRY_H_

#include "absl/status/status.h"
#include "backend/registry.h"

namespace tessera {

// Adds `count` CPU devices with `n_threads` threads each, named cpuK, cpuK+1,
// ... after the K CPU devices `registry` already has.
// Errors: ALREADY_EXISTS when `registry` already has a device of that name.
absl::Status AddCpuDevices(int count, int n_threads, Registry& registry);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_REGISTRY_H_
