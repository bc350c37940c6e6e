#ifndef TESSERA_BENCH_COUNTING_COMMUNICATOR_H_
#define TESSERA_BENCH_COUNTING_COMMUNICATOR_H_

// The collectives of a tensor-parallel run, counted and replayed on idle
// members: bench/llama's estimate of their cost apart from the waiting for
// the slower member.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "backend/comm/communicator.h"
#include "graph/type.h"

namespace tessera::bench {

// A Communicator that passes every call to `inner` and notes it, so that
// the collectives a meta device queues can be counted and replayed.
class CountingCommunicator final : public Communicator {
 public:
  enum class Kind { kAllReduce, kAllGather, kReduceScatter, kBroadcast };
  struct Call {
    Kind kind;
    Type type;
    int64_t send_elements;  // rank 0's
    int64_t recv_elements;
  };

  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}

  int size() const override { return inner_.size(); }
  Device& device(int rank) const override { return inner_.device(rank); }

  absl::Status AllReduce(absl::Span<Stream* const> streams,
                         absl::Span<Tensor* const> tensors) override {
    Note(Kind::kAllReduce, tensors, tensors);
    return inner_.AllReduce(streams, tensors);
  }
  absl::Status AllGather(absl::Span<Stream* const> streams,
                         absl::Span<Tensor* const> send,
                         absl::Span<Tensor* const> recv) override {
    Note(Kind::kAllGather, send, recv);
    return inner_.AllGather(streams, send, recv);
  }
  absl::Status ReduceScatter(absl::Span<Stream* const> streams,
                             absl::Span<Tensor* const> send,
                             absl::Span<Tensor* const> recv) override {
    Note(Kind::kReduceScatter, send, recv);
    return inner_.ReduceScatter(streams, send, recv);
  }
  absl::Status Broadcast(absl::Span<Stream* const> streams, int root,
                         absl::Span<Tensor* const> tensors) override {
    Note(Kind::kBroadcast, tensors, tensors);
    return inner_.Broadcast(streams, root, tensors);
  }

  // The calls noted since the last Take.
  std::vector<Call> Take() {
    absl::MutexLock lock(&mu_);
    return std::exchange(calls_, {});
  }

 private:
  void Note(Kind kind, absl::Span<Tensor* const> send,
            absl::Span<Tensor* const> recv) {
    if (send.empty() || recv.empty() || send[0] == nullptr ||
        recv[0] == nullptr) {
      return;  // the inner communicator rejects it
    }
    absl::MutexLock lock(&mu_);
    calls_.push_back(
        {kind, send[0]->type, send[0]->NumElements(), recv[0]->NumElements()});
  }

  Communicator& inner_;
  absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
};

// Runs of equal calls: "16 x all-reduce F32[1024]" (or "none").
std::string Describe(const std::vector<CountingCommunicator::Call>& calls);

// Median microseconds of `calls` issued back to back on new streams of
// `comm`'s members (tensors of the calls' shapes, zeros) and synchronized.
absl::StatusOr<double> ReplayMicros(
    Communicator& comm, const std::vector<CountingCommunicator::Call>& calls,
    int repeats);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_COUNTING_COMMUNICATOR_H_
