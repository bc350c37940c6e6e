#ifndef TESSERA_BACKEND_ASSEMBLY_DEVICE_SPEC_H_
#define TESSERA_BACKEND_ASSEMBLY_DEVICE_SPEC_H_

// The one place that knows every concrete backend: it turns a device spec
// into devices by calling each backend's own Add...Devices. Everything else
// sees only the device API (backend/device.h, backend/registry.h).

#include <string_view>

#include "absl/status/status.h"
#include "backend/registry.h"

namespace tessera {

// Adds the devices named by `spec` to `registry`. A spec is a comma-separated
// list of items:
//   "cpu"      one CPU device with `cpu_threads` threads
//   "cpu:N"    N CPU devices cpu0..cpuN-1, each with its own threads
//   "cuda"     every CUDA GPU found (none is not an error; none at all in a
//              build without the CUDA Toolkit)
//   "all"      every GPU found, and one CPU device
//   "NAME=meta(M0,M1,...)"
//              a tensor-parallel meta device NAME (backend/meta) over the
//              devices named M0, M1, ... (rank order; added by this spec or
//              already in `registry`; they stay devices of their own):
//              CPU members collect through the host communicator, CUDA
//              members through NCCL. Weights a client writes without a
//              split state are MIRRORED.
// The whole spec is parsed before any device is added, so a malformed item
// adds nothing; meta devices are made after every other item, once each
// member name resolves.
// Errors: INVALID_ARGUMENT for an unknown item, a bad count, cpu_threads
// below 1, a bad meta NAME, fewer than 2 or repeated members, an unknown
// member, members of mixed kinds or of a kind without a communicator;
// ALREADY_EXISTS for a name `registry` already has; a backend's error
// opening a device it found or a communicator's error.
absl::Status AddDevices(std::string_view spec, int cpu_threads,
                        Registry& registry);

}  // namespace tessera

#endif  // TESSERA_BACKEND_ASSEMBLY_DEVICE_SPEC_H_
