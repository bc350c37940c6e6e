#ifndef TESSERA_BACKEND_COMM_NCCL_COMMUNICATOR_H_
#define TESSERA_BACKEND_COMM_NCCL_COMMUNICATOR_H_

#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "backend/comm/communicator.h"
#include "backend/comm/native_cuda_stream.h"
#include "backend/device.h"
#include "backend/stream.h"

namespace tessera {

// Destroys an NCCL communicator (ncclCommDestroy).
struct NcclCommDestroyer {
  void operator()(ncclComm_t comm) const;
};
// An owned NCCL communicator; ncclCommAbort(ptr.release()) aborts it.
using NcclComm = std::unique_ptr<ncclComm, NcclCommDestroyer>;

// The Communicator for CUDA members over NCCL: all ranks of a group in one
// process (Create, ncclCommInitAll), or one rank of a group that spans
// processes, e.g. daemons (Join, ncclCommInitRankConfig with an id one of
// them made). Contract: backend/comm/communicator.h, with these specifics:
//   - every member stream must implement NativeCudaStream (else
//     INVALID_ARGUMENT), on the rank's CUDA ordinal; tensors must lie in
//     buffers of the rank's device;
//   - a call enqueues one NCCL group (one operation per rank) on the
//     members' CUDA streams and returns: the GPUs order it with the
//     streams' work;
//   - a member stream whose sticky status is an error when the call is
//     made fails the collective on every member stream (NativeCudaStream::
//     Fail) with a status naming it, and the call returns that status;
//   - an NCCL error while enqueueing is returned (its message from
//     ncclGetErrorString) and made every member stream's sticky status; a
//     fatal one (anything but an invalid argument or usage) aborts the
//     communicators (ncclCommAbort), after which every call is
//     FAILED_PRECONDITION until a new NcclCommunicator is created.
// Errors of the operations on the GPU (e.g. a peer lost) surface through
// the streams' CUDA status and CheckAsyncError.
class NcclCommunicator final : public Communicator {
 public:
  // A communicator over `devices` (rank i = devices[i], CUDA ordinal
  // ordinals[i]). Errors: INVALID_ARGUMENT for no devices, counts that
  // differ, a null device or a repeated ordinal; INTERNAL or UNAVAILABLE
  // when NCCL cannot initialize (e.g. no GPU).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      absl::Span<Device* const> devices, absl::Span<const int> ordinals);

  // A new group id (ncclGetUniqueId, NCCL_UNIQUE_ID_BYTES bytes): one
  // process makes it and gives it to every process that joins the group.
  // Errors: as NCCL's (e.g. UNAVAILABLE without a network interface).
  static absl::StatusOr<std::string> NewGroupId();
  // Rank `rank` of a group of `ranks` made with `id` (NewGroupId's bytes),
  // spanning processes; its one member is `device`, CUDA ordinal `ordinal`.
  // Blocks until every rank has joined or `timeout` passes (the attempt is
  // then aborted: DEADLINE_EXCEEDED). The communicator is NCCL's
  // non-blocking kind (blocking = 0): each call waits until NCCL has
  // enqueued its operations, at most `timeout`, after which the
  // communicators are aborted (DEADLINE_EXCEEDED). The id names a socket of
  // the process that made it, which every rank connects to: an id that is
  // not one fails as NCCL reports it, or at the timeout. Errors:
  // INVALID_ARGUMENT for a null device, an id of another size, ranks < 1 or
  // a rank outside [0, ranks); NCCL's as Create's.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Join(
      Device* device, int ordinal, absl::string_view id, int ranks, int rank,
      absl::Duration timeout);
  // Destroys the NCCL communicators (their queued operations finish first).
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const override { return static_cast<int>(devices_.size()); }
  Device& device(int rank) const override { return *devices_[rank]; }
  int ranks() const override { return ranks_; }
  int first_rank() const override { return first_rank_; }

  absl::Status AllReduce(absl::Span<Stream* const> streams,
                         absl::Span<Tensor* const> tensors) override;
  absl::Status AllGather(absl::Span<Stream* const> streams,
                         absl::Span<Tensor* const> send,
                         absl::Span<Tensor* const> recv) override;
  absl::Status ReduceScatter(absl::Span<Stream* const> streams,
                             absl::Span<Tensor* const> send,
                             absl::Span<Tensor* const> recv) override;
  absl::Status Broadcast(absl::Span<Stream* const> streams, int root,
                         absl::Span<Tensor* const> tensors) override;

  // Polls every NCCL communicator for an asynchronous error; a fatal one
  // aborts them as above. Returns it, or OK.
  absl::Status CheckAsyncError();
  // Communicator::Await: polls the CUDA streams and NCCL's asynchronous
  // errors. At the timeout the communicators are aborted (a fatal error:
  // DEADLINE_EXCEEDED); on that or any error the streams are drained and
  // failed with it, so that nothing writes the tensors afterwards.
  absl::Status Await(absl::Span<Stream* const> streams,
                     absl::Duration timeout) override;

 private:
  // Enqueues the operation of one rank: (rank, its stream) -> NCCL result.
  using RankOp = absl::FunctionRef<ncclResult_t(int, CUstream_st*)>;

  NcclCommunicator(std::vector<Device*> devices, std::vector<int> ordinals,
                   std::vector<NcclComm> comms, int ranks, int first_rank,
                   absl::Duration settle_limit);
  // The members' NativeCudaStreams, after the argument checks. Errors:
  // INVALID_ARGUMENT.
  absl::StatusOr<std::vector<NativeCudaStream*>> NativeStreams(
      absl::Span<Stream* const> streams, absl::string_view where) const;
  absl::Status CheckMemory(absl::Span<Tensor* const> tensors,
                           absl::string_view role,
                           absl::string_view where) const;
  // Runs `op` for every rank inside one NCCL group, with the error handling
  // of the class comment.
  absl::Status Launch(absl::Span<Stream* const> streams,
                      absl::string_view where, RankOp op);
  // The communicators' handles.
  std::vector<ncclComm_t> RawCommsLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Aborts the communicators and records `status` as fatal.
  void AbortLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::vector<Device*> devices_;
  const std::vector<int> ordinals_;
  const int ranks_;
  const int first_rank_;
  // How long a call waits for a non-blocking communicator (Join's) to
  // finish enqueueing before it aborts them.
  const absl::Duration settle_limit_;

  // Serializes calls (NCCL groups must not interleave) and guards the
  // communicators' life.
  absl::Mutex mu_;
  // One per rank; empty once aborted.
  std::vector<NcclComm> comms_ ABSL_GUARDED_BY(mu_);
  // The fatal error that aborted comms_, if any.
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_COMM_NCCL_COMMUNICATOR_H_
