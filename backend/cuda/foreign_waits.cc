#include "backend/cuda/foreign_waits.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace tessera {
namespace {

// Polling backs off from kMinPause to kMaxPause while nothing completes.
constexpr absl::Duration kMinPause = absl::Microseconds(20);
constexpr absl::Duration kMaxPause = absl::Milliseconds(1);

}  // namespace

absl::StatusOr<std::unique_ptr<ForeignWaits>> ForeignWaits::Create(
    std::string name) {
  std::unique_ptr<ForeignWaits> waits(new ForeignWaits(std::move(name)));
  try {
    waits->poller_ = std::thread(&ForeignWaits::Poll, waits.get());
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("[", waits->name_,
                     "] cannot start the thread for foreign events: ",
                     e.what()));
  }
  return waits;
}

ForeignWaits::~ForeignWaits() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (poller_.joinable()) poller_.join();
}

void ForeignWaits::Add(const void* key, uint64_t* flag, uint64_t target,
                       std::unique_ptr<EventMark> mark,
                       cuda_kernels::KernelError* record, std::string prefix) {
  absl::MutexLock lock(&mu_);
  waits_[key].push_back(
      {flag, target, std::move(mark), record, std::move(prefix)});
  ++added_;
}

void ForeignWaits::Cancel(const void* key) {
  absl::MutexLock lock(&mu_);
  auto it = waits_.find(key);
  if (it == waits_.end()) return;
  for (Wait& wait : it->second) {
    Release(wait, absl::CancelledError("the waiting stream was destroyed"));
  }
  waits_.erase(it);
}

void ForeignWaits::Release(Wait& wait, const absl::Status& status) {
  using cuda_kernels::KernelError;
  if (!status.ok() && wait.record->code == cuda_kernels::kKernelOk) {
    const std::string message = absl::StrCat(wait.prefix, status.message());
    const size_t n =
        std::min(message.size(), sizeof(wait.record->message) - 1);
    std::memcpy(wait.record->message, message.data(), n);
    wait.record->message[n] = '\0';
    wait.record->value = static_cast<int64_t>(status.code());
    wait.record->code = cuda_kernels::kKernelForeignEventFailed;
  }
  // The record is written before the GPU can see the target.
  std::atomic_ref<uint64_t>(*wait.flag).store(wait.target,
                                              std::memory_order_release);
}

void ForeignWaits::Poll() {
  absl::Duration pause = kMinPause;
  absl::MutexLock lock(&mu_);
  while (true) {
    if (stopping_) {
      for (auto& [key, queue] : waits_) {
        for (Wait& wait : queue) {
          Release(wait, absl::CancelledError(absl::StrCat(
                            "[", name_, "] the device is shutting down")));
        }
      }
      waits_.clear();
      return;
    }
    bool released = false;
    for (auto it = waits_.begin(); it != waits_.end();) {
      std::deque<Wait>& queue = it->second;
      while (!queue.empty() && queue.front().mark->IsDone()) {
        Wait& wait = queue.front();
        Release(wait, wait.mark->Wait());
        queue.pop_front();
        released = true;
      }
      if (queue.empty()) {
        waits_.erase(it++);
      } else {
        ++it;
      }
    }
    if (released) {
      pause = kMinPause;
      continue;
    }
    // Sleep until a wait is added or the pause ends; back off while the
    // marks stay pending.
    const uint64_t seen = added_;
    auto woken = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || added_ != seen;
    };
    if (waits_.empty()) {
      mu_.Await(absl::Condition(&woken));
    } else if (!mu_.AwaitWithTimeout(absl::Condition(&woken), pause)) {
      pause = std::min(pause * 2, kMaxPause);
    }
  }
}

}  // namespace tessera
