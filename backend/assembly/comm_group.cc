#include "backend/assembly/comm_group.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#ifdef TESSERA_HAVE_CUDA
#include "backend/comm/nccl_communicator.h"
#include "backend/cuda/cuda_device.h"
#endif

namespace tessera {

absl::StatusOr<std::string> NewCommGroupId(const Registry& registry) {
#ifdef TESSERA_HAVE_CUDA
  for (Device* device : registry.devices()) {
    if (dynamic_cast<CudaDevice*>(device) != nullptr) {
      return NcclCommunicator::NewGroupId();
    }
  }
#endif
  return absl::FailedPreconditionError(
      "[NewCommGroupId] no device here can join a group spanning daemons "
      "(want a CUDA device, for NCCL)");
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinCommGroup(
    Device& device, absl::string_view id, int ranks, int rank,
    absl::Duration timeout) {
#ifdef TESSERA_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaDevice*>(&device)) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                             NcclCommunicator::Join(cuda, cuda->ordinal(), id,
                                                    ranks, rank, timeout));
    return std::unique_ptr<Communicator>(std::move(comm));
  }
#endif
  return absl::FailedPreconditionError(
      absl::StrCat("[JoinCommGroup] device ", device.name(),
                   " cannot join a group spanning daemons (want a CUDA "
                   "device, for NCCL)"));
}

}  // namespace tessera
