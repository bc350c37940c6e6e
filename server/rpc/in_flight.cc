#include "server/rpc/in_flight.h"

namespace tessera::server {

size_t InFlight::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

bool InFlight::AwaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(this, &InFlight::Idle),
                               deadline);
}

void InFlight::Increment() {
  absl::MutexLock lock(&mu_);
  ++count_;
}

void InFlight::End() {
  absl::MutexLock lock(&mu_);
  --count_;
}

}  // namespace tessera::server
