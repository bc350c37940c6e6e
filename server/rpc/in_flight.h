#ifndef TESSERA_SERVER_RPC_IN_FLIGHT_H_
#define TESSERA_SERVER_RPC_IN_FLIGHT_H_

// Counts the work the service has in flight: offloaded calls until their
// status is sent, tensor streams while open, and Execute streams while a
// request read has no response written. A drain waits on it. Streams that
// only watch (Attach, health Watch) are not work and are not counted.

#include <cstddef>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera::server {

class InFlight {
 public:
  // One piece of work, counted while the Hold lives; a moved-from Hold
  // counts nothing.
  class Hold {
   public:
    Hold(Hold&& other) noexcept : counter_(other.counter_) {
      other.counter_ = nullptr;
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    Hold& operator=(Hold&&) = delete;
    ~Hold() {
      if (counter_ != nullptr) counter_->End();
    }

   private:
    friend class InFlight;
    explicit Hold(InFlight& counter) : counter_(&counter) {
      counter_->Increment();
    }
    InFlight* counter_;
  };

  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  Hold Begin() { return Hold(*this); }
  size_t count() const;
  // Waits until nothing is in flight or `deadline` passes; returns whether
  // nothing is.
  bool AwaitIdle(absl::Time deadline);

 private:
  void Increment();
  void End();
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ == 0; }

  mutable absl::Mutex mu_;
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_IN_FLIGHT_H_
