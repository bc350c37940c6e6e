#ifndef TESSERA_SERVER_RPC_DRAIN_NOTICE_H_
#define TESSERA_SERVER_RPC_DRAIN_NOTICE_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace tessera::server {

// Tells the streams that watch the daemon (Attach) that it has started to
// drain. Thread-safe.
class DrainNotice {
 public:
  DrainNotice() = default;
  DrainNotice(const DrainNotice&) = delete;
  DrainNotice& operator=(const DrainNotice&) = delete;

  // Registers `listener`, called once when the drain starts (at once, on
  // this thread, if it already has); returns the id for Remove.
  uint64_t Add(std::function<void()> listener);
  // Unregisters; waits for a call of that listener in progress to return.
  void Remove(uint64_t id);
  // Starts the drain: calls every listener once. Idempotent.
  void Announce();

 private:
  // Held while listeners run, so that Remove waits for them.
  absl::Mutex mu_;
  bool announced_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::function<void()>> listeners_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_DRAIN_NOTICE_H_
