#ifndef TESSERA_BACKEND_COMM_COMMUNICATOR_H_
#define TESSERA_BACKEND_COMM_COMMUNICATOR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "backend/device.h"
#include "backend/stream.h"
#include "graph/tensor.h"
#include "graph/type.h"

namespace tessera {

// Collective operations over N ranks (the NCCL model), for tensor
// parallelism. Rank i is member device `device(i)`; each call names one
// stream of each member, `streams[i]` a stream of `device(i)`, and one
// tensor (or a send and a receive tensor) per rank, `tensors[i]` in memory
// that rank i's device uses.
//
// Every collective is asynchronous and queued on the member streams, as
// if it were one more entry in each stream's queue:
//   - it starts once each stream's work queued before the call is done;
//   - each stream's work queued after the call waits for it;
//   - the call returns once it is queued; tensors must stay allocated, and
//     the communicator alive, until the streams have run it (e.g. until
//     each stream's Synchronize returns).
// Collectives run in the order they are called (first in, first out), so
// back-to-back calls on the same streams cannot deadlock or reorder.
//
// Errors. Argument errors are INVALID_ARGUMENT at once and queue nothing:
// a stream or tensor count other than size(), a null stream or tensor, a
// stream of another device than its rank's, an unallocated or
// non-contiguous tensor, one that does not lie inside its buffer, or memory
// the implementation cannot reach, tensors whose types or shapes differ
// across ranks, a type the operation does not reduce, and sizes that do
// not match. Failures while running become the sticky status of every
// member stream (Stream::Synchronize returns it and later work is
// skipped): in particular a member stream whose earlier work failed fails
// the collective on every rank, with a status naming that rank and device.
// Nothing aborts.
//
// Reductions sum. F32, F16 and BF16 are reduced, accumulating in F32 and
// rounding once to the tensor's type; other types are INVALID_ARGUMENT.
// Thread-safe: concurrent calls are serialized, so every member stream
// sees collectives in the same order (the streams' own rule still holds:
// one thread at a time queues work on a stream).
class Communicator {
 public:
  virtual ~Communicator() = default;

  // The number of ranks, N >= 1.
  virtual int size() const = 0;
  // The device of `rank`, 0 <= rank < size().
  virtual Device& device(int rank) const = 0;

  // A communicator may hold only some ranks of a group that spans
  // processes (NcclCommunicator::Join): its size() members are then ranks
  // first_rank() .. first_rank() + size() - 1 of a group of ranks(). The
  // calls still take one stream and tensor (pair) per member; what counts
  // ranks counts the group's: AllGather's and ReduceScatter's blocks (N is
  // ranks()), their in-place block (that of the member's group rank) and
  // Broadcast's root (a group rank; the other processes call too).
  virtual int ranks() const { return size(); }
  virtual int first_rank() const { return 0; }

  // Waits until the work queued on `streams` (one per member, as in the
  // calls) is done, collectives included, and returns the first error among
  // the streams' sticky statuses (OK if none). A communicator spanning processes gives up a collective
  // whose other ranks do not come within `timeout` and aborts it
  // (DEADLINE_EXCEEDED, also the streams' status); in one process every
  // rank is queued by the call itself, so this is each stream's
  // Synchronize.
  virtual absl::Status Await(absl::Span<Stream* const> streams,
                             absl::Duration timeout);

  // In place: every rank's `tensors[i]` becomes the element-wise sum of
  // all ranks' tensors. Tensors have the same type and shape on every
  // rank.
  virtual absl::Status AllReduce(absl::Span<Stream* const> streams,
                                 absl::Span<Tensor* const> tensors) = 0;

  // Every rank's `recv[i]` becomes the bytes of send[0], send[1], ...,
  // send[N-1] concatenated in rank order. The send tensors have the same
  // type and shape, as do the receive tensors, and each receive tensor has
  // N times a send tensor's bytes. Any type. A send tensor may lie inside
  // its rank's receive tensor only where its block goes (in place: send[i]
  // at byte i * send bytes of recv[i]); other overlaps are
  // INVALID_ARGUMENT.
  virtual absl::Status AllGather(absl::Span<Stream* const> streams,
                                 absl::Span<Tensor* const> send,
                                 absl::Span<Tensor* const> recv) = 0;

  // Each send tensor is cut into N equal contiguous byte blocks; rank i's
  // `recv[i]` becomes the element-wise sum over ranks of block i. The
  // send tensors have the same type and shape, as do the receive tensors,
  // all of one reduced type, and a send tensor has N times a receive
  // tensor's elements. In place is allowed as for AllGather (recv[i] at
  // block i of send[i]); other overlaps are INVALID_ARGUMENT.
  virtual absl::Status ReduceScatter(absl::Span<Stream* const> streams,
                                     absl::Span<Tensor* const> send,
                                     absl::Span<Tensor* const> recv) = 0;

  // Every rank's `tensors[i]` becomes a copy of `tensors[root]`. Tensors
  // have the same type and shape on every rank; any type.
  // Errors: INVALID_ARGUMENT also for a root outside [0, N).
  virtual absl::Status Broadcast(absl::Span<Stream* const> streams, int root,
                                 absl::Span<Tensor* const> tensors) = 0;
};

// Argument checks shared by the implementations: each returns the first
// argument error of its collective as INVALID_ARGUMENT, its message
// prefixed with `where` (e.g. "[HostCommunicator::AllReduce]"), or OK. They
// check what the Communicator contract lists except the memory an
// implementation can reach, which each implementation adds.
absl::Status CheckAllReduceArgs(const Communicator& comm,
                                absl::Span<Stream* const> streams,
                                absl::Span<Tensor* const> tensors,
                                absl::string_view where);
absl::Status CheckAllGatherArgs(const Communicator& comm,
                                absl::Span<Stream* const> streams,
                                absl::Span<Tensor* const> send,
                                absl::Span<Tensor* const> recv,
                                absl::string_view where);
absl::Status CheckReduceScatterArgs(const Communicator& comm,
                                    absl::Span<Stream* const> streams,
                                    absl::Span<Tensor* const> send,
                                    absl::Span<Tensor* const> recv,
                                    absl::string_view where);
absl::Status CheckBroadcastArgs(const Communicator& comm,
                                absl::Span<Stream* const> streams, int root,
                                absl::Span<Tensor* const> tensors,
                                absl::string_view where);

// Whether collectives reduce `type` (F32, F16, BF16).
bool IsReducedType(Type type);

}  // namespace tessera

#endif  // TESSERA_BACKEND_COMM_COMMUNICATOR_H_
