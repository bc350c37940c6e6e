#ifndef TESSERA_BACKEND_COMM_HOST_COMMUNICATOR_H_
#define TESSERA_BACKEND_COMM_HOST_COMMUNICATOR_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "backend/comm/communicator.h"
#include "backend/device.h"
#include "backend/event.h"
#include "backend/stream.h"
#include "backend/ticket_event.h"

namespace tessera {

// The in-process Communicator whose collectives the host CPU runs. Uses
// only the device API. Contract: backend/comm/communicator.h. Members'
// tensors in host memory (BufferType::is_host, e.g. CPU devices) are read
// and written in place; the tensors of members whose memory the host cannot
// address (a RemoteDevice's, e.g. members on other daemons) are staged:
// read into host memory with Buffer::GetTensor before the collective and
// written back with Buffer::SetTensor after it, one thread per rank.
//
// How a collective runs:
//   1. The call records a new event of each member's device on its stream,
//      then makes the stream wait for the communicator's TicketEvent of that
//      stream (one per stream, a new ticket per call), and queues the
//      collective on the communicator's worker (first in, first out).
//   2. The worker waits for every recorded event. If a member's event
//      reports an error, the collective fails with a status naming the
//      member, and moves no data.
//   3. Staged tensors the collective reads are read into host memory.
//   4. The worker and size() - 1 helper threads each move one contiguous
//      part of the bytes for all ranks (reductions: each thread sums its
//      part across every rank into a small F32 tile, then stores the
//      rounded sum to every rank), and meet at a barrier.
//   5. Staged tensors the collective writes are written back.
//   6. The worker completes each stream's ticket with the collective's
//      status; a failure (also of a staged read or write, naming the rank)
//      becomes the stream's sticky status.
// Resources: size() threads for the communicator's life, one TicketEvent
// per distinct stream it was called with, and per call in flight one event
// per rank and host copies of its staged tensors.
class HostCommunicator final : public Communicator {
 public:
  // A communicator over `devices` (rank i = devices[i]).
  // Errors: INVALID_ARGUMENT for no devices, a null or repeated device, or
  // a device without events; RESOURCE_EXHAUSTED when a thread cannot be
  // started.
  static absl::StatusOr<std::unique_ptr<HostCommunicator>> Create(
      absl::Span<Device* const> devices);
  // Runs the collectives queued so far, then joins the threads. The member
  // streams must have passed every collective (see the contract).
  ~HostCommunicator() override;
  HostCommunicator(const HostCommunicator&) = delete;
  HostCommunicator& operator=(const HostCommunicator&) = delete;

  int size() const override { return static_cast<int>(devices_.size()); }
  Device& device(int rank) const override { return *devices_[rank]; }

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

 private:
  // Moves part `part` of `parts` of a collective's bytes.
  using PartFn = absl::AnyInvocable<void(int part, int parts)>;
  struct Collective;

  explicit HostCommunicator(std::vector<Device*> devices);
  // A new collective named `where`.
  static std::unique_ptr<Collective> NewCollective(absl::string_view where);
  // The host address at which `collective` moves the bytes of `t`, rank
  // `rank`'s tensor: t->data in host memory, else a staging copy, read from
  // `t` in step 3 if `read` and written back in step 5 if `write`.
  // Errors: RESOURCE_EXHAUSTED when the copy cannot be allocated.
  static absl::StatusOr<char*> Map(Collective& collective, int rank, Tensor* t,
                                   bool read, bool write);
  // Step 1: records, waits and queues `collective`, whose `run` moves the
  // bytes in `parts` parts.
  absl::Status Enqueue(std::unique_ptr<Collective> collective,
                       absl::Span<Stream* const> streams, int parts,
                       PartFn run);
  // Steps 2 to 6, on the worker.
  void WorkerLoop();
  void Run(Collective& collective);
  // Steps 3 and 5: reads (`in`) or writes back the staged tensors, one
  // rank per part. Returns the first failure, naming its rank.
  absl::Status Stage(Collective& collective, bool in);
  // Runs `fn` in `parts` parts (at most size()): part 0 on the calling
  // worker, the others on the helpers; returns when all are done.
  void RunParts(PartFn& fn, int parts);
  // The helper thread that runs part `index` of each collective.
  void HelperLoop(int index);

  // Constant after construction.
  const std::vector<Device*> devices_;

  // Serializes calls, so that every stream sees collectives in one order.
  absl::Mutex call_mu_;
  // The TicketEvent each stream waits on, by stream.
  absl::flat_hash_map<Stream*, std::unique_ptr<TicketEvent>> done_events_
      ABSL_GUARDED_BY(call_mu_);

  // The worker's queue.
  absl::Mutex queue_mu_;
  std::deque<std::unique_ptr<Collective>> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;

  // The team: the worker hands the helpers one collective's parts at a time.
  absl::Mutex team_mu_;
  PartFn* team_fn_ ABSL_GUARDED_BY(team_mu_) = nullptr;
  int team_parts_ ABSL_GUARDED_BY(team_mu_) = 0;
  uint64_t team_generation_ ABSL_GUARDED_BY(team_mu_) = 0;
  int team_pending_ ABSL_GUARDED_BY(team_mu_) = 0;
  bool team_stopping_ ABSL_GUARDED_BY(team_mu_) = false;

  // Started last in Create, joined first in the destructor (the worker
  // before the helpers).
  std::thread worker_;
  std::vector<std::thread> helpers_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_COMM_HOST_COMMUNICATOR_H_
