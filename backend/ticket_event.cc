#include "backend/ticket_event.h"

#include <memory>
#include <utility>

#include "backend/spin.h"

namespace tessera {
namespace {

class TicketMark final : public EventMark {
 public:
  TicketMark(TicketEvent& event, uint64_t ticket)
      : event_(event), ticket_(ticket) {}
  absl::Status Wait() override { return event_.WaitFor(ticket_); }
  bool IsDone() override { return event_.IsComplete(ticket_); }

 private:
  TicketEvent& event_;
  const uint64_t ticket_;
};

}  // namespace

TicketEvent::TicketEvent(Device& device) : device_(device) {}

Device& TicketEvent::device() { return device_; }

absl::Status TicketEvent::Synchronize() { return WaitFor(last_recorded()); }

bool TicketEvent::IsDone() {
  absl::MutexLock lock(&mu_);
  return completed_ >= recorded_;
}

std::unique_ptr<EventMark> TicketEvent::Capture() {
  return std::make_unique<TicketMark>(*this, last_recorded());
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
  if (ticket <= completed_.load(std::memory_order_relaxed)) return;
  status_ = std::move(status);
  completed_.store(ticket, std::memory_order_release);
}

bool TicketEvent::IsComplete(uint64_t ticket) {
  return completed_.load(std::memory_order_acquire) >= ticket;
}

absl::Status TicketEvent::WaitFor(uint64_t ticket) {
  auto done = [this, ticket] { return IsComplete(ticket); };
  // A waiter often waits for a short graph: polling first saves a sleeping
  // thread's wake-up.
  SpinUntil(done);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done));
  return status_;
}

}  // namespace tessera
