#ifndef TESSERA_BACKEND_CPU_THREAD_POOL_H_
#define TESSERA_BACKEND_CPU_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tessera {

// A counter that threads wait on to change: they spin briefly (cheap when
// the change is near, as between the nodes of a graph), then sleep on a
// condition variable. Thread-safe.
class SpinWaitCounter {
 public:
  uint32_t Load() const { return value_.load(std::memory_order_acquire); }
  // Increments the value and wakes every waiter. Writes made before Advance
  // are visible to a thread once it sees the new value.
  void Advance();
  // Returns once the value differs from `seen`.
  void WaitChange(uint32_t seen);

 private:
  std::atomic<uint32_t> value_{0};
  // Threads that are, or are about to be, asleep in WaitChange.
  std::atomic<int> sleepers_{0};
  absl::Mutex mu_;
  absl::CondVar cv_;
};

// A fixed team of n threads for data-parallel work: the thread that calls
// Run plus n - 1 persistent helpers (ggml's compute threads). Run hands one
// function to the whole team, so a graph costs one wake-up and each node
// one Barrier, with no thread started per op.
//
// Usage, computing the nodes of a graph by rows:
//   pool.Run([&](int ith) {
//     for (Tensor* node : nodes) {
//       Compute(*node, ith, pool.size());
//       pool.Barrier();
//     }
//   });
//
// Run is called by one thread at a time (the owner); Barrier only from
// inside the function Run is running, by every thread of the team the same
// number of times.
class ThreadPool {
 public:
  // Starts n_threads - 1 helpers (n_threads >= 1).
  // Errors: RESOURCE_EXHAUSTED when a thread cannot be started.
  static absl::StatusOr<std::unique_ptr<ThreadPool>> Create(int n_threads);
  // Stops and joins the helpers. Not while Run is running.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(ith) for ith = 0..size()-1, fn(0) on the calling thread and
  // the others on the helpers, and returns when every call has returned.
  void Run(absl::FunctionRef<void(int)> fn);

  // Blocks until every thread of the team has reached it; writes made
  // before it by any thread are visible after it to all.
  void Barrier();

 private:
  explicit ThreadPool(int n_threads) : n_threads_(n_threads) {}
  void HelperLoop(int ith);

  const int n_threads_;
  std::vector<std::thread> helpers_;

  // Dispatch: Run publishes fn_ then advances work_; helpers see the change,
  // read fn_ and call it. stop_ asks the helpers to exit.
  const absl::FunctionRef<void(int)>* fn_ = nullptr;
  std::atomic<bool> stop_{false};
  SpinWaitCounter work_;

  // Barrier: threads count themselves in arrived_; the last one resets it
  // and advances barrier_, releasing the others.
  std::atomic<int> arrived_{0};
  SpinWaitCounter barrier_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_THREAD_POOL_H_
