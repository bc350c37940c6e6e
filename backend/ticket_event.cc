#include "backend/ticket_event.h"

#include <utility>

namespace tessera {

TicketEvent::TicketEvent(Device& device) : device_(device) {}

Device& TicketEvent::device() { return device_; }

absl::Status TicketEvent::Synchronize() { return WaitFor(last_recorded()); }

bool TicketEvent::IsDone() {
  absl::MutexLock lock(&mu_);
  return completed_ >= recorded_;
}

uint64_t TicketEvent::Record() {
  absl::MutexLock lock(&mu_);
  return ++recorded_;
}

uint64_t TicketEvent::last_recorded() {
  absl::MutexLock lock(&mu_);
  return recorded_;
}

void TicketEvent::Complete(uint64_t ticket, absl::Status status) {
  absl::MutexLock lock(&mu_);
  // Recordings on two streams may complete out of order; the newest wins.
  if (ticket <= completed_) return;
  completed_ = ticket;
  status_ = std::move(status);
}

absl::Status TicketEvent::WaitFor(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return completed_ >= ticket;
  };
  mu_.Await(absl::Condition(&done));
  return status_;
}

}  // namespace tessera
