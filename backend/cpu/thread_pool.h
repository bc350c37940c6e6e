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
#include "absl/time/time.h"

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
  // WaitChange for at most `timeout`: whether the value differs from
  // `seen`.
  bool WaitChangeFor(uint32_t seen, absl::Duration timeout);

 private:
  // Spins until the value differs from `seen` or the spin is over; whether
  // it differs.
  bool SpinWhileEqual(uint32_t seen) const;

  std::atomic<uint32_t> value_{0};
  // Threads that are, or are about to be, asleep in WaitChange.
  std::atomic<int> sleepers_{0};
  absl::Mutex mu_;
  absl::CondVar cv_;
};

// A team of up to n threads for data-parallel work: the thread that calls
// Run plus n - 1 helpers (ggml's compute threads). Run hands one function
// to the whole team, so a graph costs one wake-up and each node one
// Barrier, with no thread started per op while the pool is in use.
//
// An idle pool costs no thread: Run starts the helpers that are not
// running, and a helper exits once no Run has come for `linger`. When a
// helper cannot be started, Run runs with the team it has (a warning is
// logged once): size() is the team of the current Run.
//
// Usage, computing the nodes of a graph by rows:
//   pool.Run([&](int ith) {
//     for (Tensor* node : nodes) {
//       Compute(*node, ith, pool.size());
//       pool.Barrier();
//     }
//   });
//
// Run is called by one thread at a time (the owner); size() and Barrier
// only from inside the function Run is running, Barrier by every thread of
// the team the same number of times.
class ThreadPool {
 public:
  // A pool of up to n_threads (>= 1); starts no thread.
  // Errors: INVALID_ARGUMENT when n_threads < 1.
  static absl::StatusOr<std::unique_ptr<ThreadPool>> Create(
      int n_threads, absl::Duration linger);
  // Stops and joins the helpers. Not while Run is running.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The team when every helper runs: n_threads.
  int max_size() const { return n_threads_; }
  // The team of the Run in progress, 1 to max_size(): fixed for the whole
  // Run.
  int size() const { return team_; }

  // Calls fn(ith) for ith = 0..size()-1, fn(0) on the calling thread and
  // the others on the helpers, and returns when every call has returned.
  void Run(absl::FunctionRef<void(int)> fn);

  // Blocks until every thread of the team has reached it; writes made
  // before it by any thread are visible after it to all.
  void Barrier();

 private:
  ThreadPool(int n_threads, absl::Duration linger)
      : n_threads_(n_threads), linger_(linger), helpers_(n_threads - 1) {}
  // Helper `ith`, started while the work counter was `seen`: it takes part
  // in every Run until it has waited `linger_` for one, then exits.
  void HelperLoop(int ith, uint32_t seen);

  const int n_threads_;
  const absl::Duration linger_;

  // Helpers 1..running_ run (ggml's thread indices): Run starts the
  // others, and only the highest running one exits, so every running
  // helper is in the team. work_ advances only under mu_, so a helper
  // that timed out decides under mu_, with no Run in between, that no
  // work has come before it exits.
  absl::Mutex mu_;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  // helpers_[ith - 1]: the last thread started as helper ith; joined
  // before the next one starts, or by the destructor.
  std::vector<std::thread> helpers_ ABSL_GUARDED_BY(mu_);
  bool warned_ ABSL_GUARDED_BY(mu_) = false;  // of a helper that failed

  // Dispatch: Run sets team_ and fn_ then advances work_; helpers see the
  // change, read fn_ and call it. stop_ asks the helpers to exit.
  int team_ = 1;
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
