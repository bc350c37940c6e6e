#include "backend/cpu/cpu_event.h"

#include <utility>

#include "backend/cpu/cpu_device.h"

namespace tessera {

CpuEvent::CpuEvent(CpuDevice& device) : device_(device) {}

Device& CpuEvent::device() { return device_; }

absl::Status CpuEvent::Synchronize() { return WaitFor(last_recorded()); }

bool CpuEvent::IsDone() {
  absl::MutexLock lock(&mu_);
  return completed_ >= recorded_;
}

uint64_t CpuEvent::Record() {
  absl::MutexLock lock(&mu_);
  return ++recorded_;
}

uint64_t CpuEvent::last_recorded() {
  absl::MutexLock lock(&mu_);
  return recorded_;
}

void CpuEvent::Complete(uint64_t ticket, absl::Status status) {
  absl::MutexLock lock(&mu_);
  // Recordings on two streams may complete out of order; the newest wins.
  if (ticket <= completed_) return;
  completed_ = ticket;
  status_ = std::move(status);
}

absl::Status CpuEvent::WaitFor(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return completed_ >= ticket;
  };
  mu_.Await(absl::Condition(&done));
  return status_;
}

}  // namespace tessera
