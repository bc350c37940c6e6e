#ifndef TESSERA_BACKEND_ASSEMBLY_COMM_GROUP_H_
#define TESSERA_BACKEND_ASSEMBLY_COMM_GROUP_H_

// Collective groups that span processes (e.g. daemons), for a device of any
// kind: the one place that picks their implementation. CUDA devices join
// NCCL groups (NcclCommunicator::Join); other kinds have none.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "backend/comm/communicator.h"
#include "backend/device.h"
#include "backend/registry.h"

namespace tessera {

// A new group id, made for the devices of `registry`. Errors:
// FAILED_PRECONDITION when none of them can join a group (no CUDA device,
// or a build without CUDA); NCCL's errors.
absl::StatusOr<std::string> NewCommGroupId(const Registry& registry);

// The communicator of rank `rank` of a group of `ranks` made with `id`, its
// one member `device`; blocks until every rank has joined or `timeout`
// passes (DEADLINE_EXCEEDED). Errors: FAILED_PRECONDITION for a device
// that cannot join (not a CUDA device); INVALID_ARGUMENT for a bad id, rank
// or count.
absl::StatusOr<std::unique_ptr<Communicator>> JoinCommGroup(
    Device& device, absl::string_view id, int ranks, int rank,
    absl::Duration timeout);

}  // namespace tessera

#endif  // TESSERA_BACKEND_ASSEMBLY_COMM_GROUP_H_
