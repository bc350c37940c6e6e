#include "backend/cpu/thread_pool.h"

#include <atomic>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "backend/spin.h"
#include "spdlog/spdlog.h"

namespace tessera {

void SpinWaitCounter::Advance() {
  // seq_cst on both sides (here and in WaitChange) orders the value change
  // against the sleepers count: either the waiter sees the new value before
  // sleeping, or this sees the sleeper and signals under the mutex.
  value_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    absl::MutexLock lock(&mu_);
    cv_.SignalAll();
  }
}

bool SpinWaitCounter::SpinWhileEqual(uint32_t seen) const {
  return SpinUntil(
      [&] { return value_.load(std::memory_order_acquire) != seen; });
}

void SpinWaitCounter::WaitChange(uint32_t seen) {
  if (SpinWhileEqual(seen)) return;
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  {
    absl::MutexLock lock(&mu_);
    while (value_.load(std::memory_order_seq_cst) == seen) cv_.Wait(&mu_);
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

bool SpinWaitCounter::WaitChangeFor(uint32_t seen, absl::Duration timeout) {
  if (SpinWhileEqual(seen)) return true;
  const absl::Time deadline = absl::Now() + timeout;
  bool changed = false;
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  {
    absl::MutexLock lock(&mu_);
    bool timed_out = false;
    while (!(changed = value_.load(std::memory_order_seq_cst) != seen) &&
           !timed_out) {
      timed_out = cv_.WaitWithDeadline(&mu_, deadline);
    }
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  return changed;
}

absl::StatusOr<std::unique_ptr<ThreadPool>> ThreadPool::Create(
    int n_threads, absl::Duration linger) {
  if (n_threads < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[ThreadPool] n_threads must be at least 1, got %d", n_threads));
  }
  return std::unique_ptr<ThreadPool>(new ThreadPool(n_threads, linger));
}

ThreadPool::~ThreadPool() {
  std::vector<std::thread> helpers;
  {
    absl::MutexLock lock(&mu_);
    stop_.store(true, std::memory_order_relaxed);
    work_.Advance();
    helpers.swap(helpers_);
  }
  for (std::thread& helper : helpers) {
    if (helper.joinable()) helper.join();
  }
}

void ThreadPool::Run(absl::FunctionRef<void(int)> fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    // 1. Start the helpers that are not running, lowest index first; the
    //    team is this thread and the helpers that run then.
    const uint32_t seen = work_.Load();
    while (running_ < n_threads_ - 1) {
      const int ith = running_ + 1;
      std::thread& slot = helpers_[ith - 1];
      // A previous helper ith has marked itself gone: it only returns.
      if (slot.joinable()) slot.join();
      try {
        slot = std::thread(&ThreadPool::HelperLoop, this, ith, seen);
      } catch (const std::system_error& e) {
        if (!warned_) {
          warned_ = true;
          spdlog::warn(
              "[ThreadPool] cannot start helper thread {} of {} ({}): "
              "computing with {} threads until it can",
              ith, n_threads_ - 1, e.what(), ith);
        }
        break;
      }
      ++running_;
    }
    // 2. Publish the work under mu_: a helper that has timed out sees it
    //    before it may exit.
    team_ = running_ + 1;
    fn_ = &fn;
    work_.Advance();
  }
  fn(0);
  // Every helper passes this barrier after its call returns, so none is
  // still reading fn_ when Run returns.
  Barrier();
  fn_ = nullptr;
}

void ThreadPool::Barrier() {
  // Both read before arriving: the generation cannot advance, nor the next
  // Run set the team, until this thread has arrived too.
  const int team = team_;
  if (team == 1) return;
  const uint32_t generation = barrier_.Load();
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == team) {
    arrived_.store(0, std::memory_order_relaxed);
    barrier_.Advance();
    return;
  }
  barrier_.WaitChange(generation);
}

void ThreadPool::HelperLoop(int ith, uint32_t seen) {
  while (true) {
    if (!work_.WaitChangeFor(seen, linger_)) {
      // Idle for the linger: exit once this is the highest running helper
      // (so the running ones stay 1..running_), unless work comes first.
      absl::MutexLock lock(&mu_);
      auto turn = [this, ith, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return work_.Load() != seen || running_ == ith;
      };
      mu_.Await(absl::Condition(&turn));
      if (work_.Load() == seen) {
        running_ = ith - 1;
        return;
      }
    }
    seen = work_.Load();
    if (stop_.load(std::memory_order_relaxed)) return;
    (*fn_)(ith);
    Barrier();
  }
}

}  // namespace tessera
