#ifndef TESSERA_BACKEND_CPU_CPU_REGISTRY_H_
#define TESSERA_BACKEND_CPU_CPU_REGISTRY_H_

#include "absl/status/status.h"
#include "backend/registry.h"

namespace tessera {

// Adds `count` CPU devices with `n_threads` threads each, named cpuK, cpuK+1,
// ... after the K CPU devices `registry` already has. They share the memory
// the process may use (UsableHostMemory, backend/cpu/host_memory.h): each
// has 1/count of it as its total, so together they never promise more than
// the host can back.
// Errors: ALREADY_EXISTS when `registry` already has a device of that name.
absl::Status AddCpuDevices(int count, int n_threads, Registry& registry);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_REGISTRY_H_
