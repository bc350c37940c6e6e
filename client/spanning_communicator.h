#ifndef TESSERA_CLIENT_SPANNING_COMMUNICATOR_H_
#define TESSERA_CLIENT_SPANNING_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "backend/comm/communicator.h"
#include "client/remote_device.h"

namespace tessera::client {

// A Communicator over devices of several daemons that run the collectives
// among themselves, as one group spanning them (NCCL: CUDA devices, the
// data going GPU to GPU, not through this client). Rank i is members[i].
// Contract: backend/comm/communicator.h, with these specifics:
//   - Create has members[0]'s daemon make the group id, then every member's
//     daemon join the group (all at once: a join returns once every rank
//     has joined);
//   - a collective is queued on each member's stream (a RemoteStream of
//     its device) as a RunCollective call: the daemon runs its rank's part
//     after the stream's earlier work, and the stream's later work waits
//     for the answer;
//   - tensors lie in remote buffers of their rank's device;
//   - a daemon's failure (e.g. a rank that does not come within the
//     timeout: DEADLINE_EXCEEDED) becomes that member stream's sticky
//     status.
// For members the host communicator can reach instead (any device,
// through this client's memory), see HostCommunicator.
class SpanningCommunicator final : public Communicator {
 public:
  // `timeout` bounds each wait for the other ranks (joining, and each
  // collective), 1 ms to 600 s. Errors: INVALID_ARGUMENT for no members, a
  // null one, two members of one Client (one session runs one collective at
  // a time), or a timeout out of range; FAILED_PRECONDITION when a member's
  // device cannot join such a group (not a CUDA device); the daemons' errors,
  // naming the rank.
  static absl::StatusOr<std::unique_ptr<SpanningCommunicator>> Create(
      absl::Span<RemoteDevice* const> members,
      absl::Duration timeout = absl::Seconds(60));
  // Leaves the group on every daemon. The member streams must have run
  // every collective.
  ~SpanningCommunicator() override;
  SpanningCommunicator(const SpanningCommunicator&) = delete;
  SpanningCommunicator& operator=(const SpanningCommunicator&) = delete;

  int size() const override { return static_cast<int>(members_.size()); }
  Device& device(int rank) const override { return *members_[rank]; }

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
  SpanningCommunicator(std::vector<RemoteDevice*> members,
                       std::vector<uint64_t> groups, absl::Duration timeout)
      : members_(std::move(members)),
        groups_(std::move(groups)),
        timeout_(timeout) {}
  // Queues rank i's RunCollective of `kind` on streams[i]: `send[i]`, and
  // `recv[i]` when given, of `elements` values (the request's meaning).
  absl::Status Queue(absl::string_view where, absl::Span<Stream* const> streams,
                     int kind, absl::Span<Tensor* const> send,
                     absl::Span<Tensor* const> recv, uint64_t elements,
                     int root);

  const std::vector<RemoteDevice*> members_;
  const std::vector<uint64_t> groups_;  // the group's handle on each daemon
  const absl::Duration timeout_;
  // Serializes calls, so that every member sees collectives in one order.
  absl::Mutex mu_;
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_SPANNING_COMMUNICATOR_H_
