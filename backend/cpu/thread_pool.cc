#include "backend/cpu/thread_pool.h"

#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {

// Spins before sleeping: long enough to bridge the gap between two small
// nodes or two graphs queued back to back, short enough not to burn a core
// when the stream goes idle.
constexpr int kSpinIterations = 2048;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

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

void SpinWaitCounter::WaitChange(uint32_t seen) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (value_.load(std::memory_order_acquire) != seen) return;
    CpuRelax();
  }
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  {
    absl::MutexLock lock(&mu_);
    while (value_.load(std::memory_order_seq_cst) == seen) cv_.Wait(&mu_);
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

absl::StatusOr<std::unique_ptr<ThreadPool>> ThreadPool::Create(int n_threads) {
  if (n_threads < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[ThreadPool] n_threads must be at least 1, got %d", n_threads));
  }
  std::unique_ptr<ThreadPool> pool(new ThreadPool(n_threads));
  pool->helpers_.reserve(n_threads - 1);
  for (int ith = 1; ith < n_threads; ++ith) {
    try {
      pool->helpers_.emplace_back(&ThreadPool::HelperLoop, pool.get(), ith);
    } catch (const std::system_error& e) {
      // The destructor stops the helpers already started.
      return absl::ResourceExhaustedError(absl::StrFormat(
          "[ThreadPool] cannot start helper thread %d of %d: %s", ith,
          n_threads - 1, e.what()));
    }
  }
  return pool;
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  work_.Advance();
  for (std::thread& helper : helpers_) helper.join();
}

void ThreadPool::Run(absl::FunctionRef<void(int)> fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  fn_ = &fn;
  work_.Advance();
  fn(0);
  // Every helper passes this barrier after its call returns, so none is
  // still reading fn_ when Run returns.
  Barrier();
  fn_ = nullptr;
}

void ThreadPool::Barrier() {
  if (n_threads_ == 1) return;
  // Read before arriving: the generation cannot advance until this thread
  // has arrived too.
  const uint32_t generation = barrier_.Load();
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_threads_) {
    arrived_.store(0, std::memory_order_relaxed);
    barrier_.Advance();
    return;
  }
  barrier_.WaitChange(generation);
}

void ThreadPool::HelperLoop(int ith) {
  uint32_t seen = 0;
  while (true) {
    work_.WaitChange(seen);
    seen = work_.Load();
    if (stop_.load(std::memory_order_relaxed)) return;
    (*fn_)(ith);
    Barrier();
  }
}

}  // namespace tessera
