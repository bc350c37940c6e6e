#ifndef TESSERA_SERVER_SESSIONS_SESSION_MANAGER_H_
#define TESSERA_SERVER_SESSIONS_SESSION_MANAGER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/sessions/heap_trimmer.h"
#include "server/sessions/memory_account.h"
#include "server/sessions/session.h"

namespace tessera::server {

// The open sessions by id. Ids are 128 random bits in hex, so they cannot
// be guessed. A session ends by Close, by the end of its Attach stream
// (Detach), or by staying idle (no Find) longer than `idle_timeout` while
// not attached. Ending a session closes it (session.h), which frees what it
// holds once in-flight requests using it finish.
//
// A timer thread checks for idle sessions and, after sessions close, gives
// the heap's free memory back to the system (HeapTrimmer, at most once a
// second), off the threads that serve requests. Thread-safe.
class SessionManager {
 public:
  // Whether Create takes new sessions: not while the daemon's devices are
  // still opening, nor while it drains.
  enum class Admission { kStarting, kOpen, kDraining };

  // `idle_timeout` zero: sessions never expire. Each session's memory
  // account has `session_quota` bytes (0: none) under `budget`, the
  // daemon-wide account (null: none).
  SessionManager(absl::Duration idle_timeout, size_t max_sessions,
                 uint64_t session_quota = 0,
                 std::shared_ptr<MemoryAccount> budget = nullptr);
  // Stops the timer and closes every session.
  ~SessionManager();
  SessionManager(const SessionManager&) = delete;
  SessionManager& operator=(const SessionManager&) = delete;

  // The session keeps `client_name` as ClientText (control characters
  // escaped, cut at 256 bytes) for logs. Errors: RESOURCE_EXHAUSTED at
  // max_sessions; UNAVAILABLE unless the admission is kOpen.
  absl::StatusOr<std::shared_ptr<Session>> Create(std::string client_name);
  // kOpen from construction. Open sessions carry on whatever it is.
  void SetAdmission(Admission admission);
  // The open session `id`, touched. Errors: NOT_FOUND.
  absl::StatusOr<std::shared_ptr<Session>> Find(absl::string_view id);
  // Errors: NOT_FOUND.
  absl::Status Close(absl::string_view id);

  // Marks `id` attached: it no longer expires when idle. Errors: NOT_FOUND;
  // FAILED_PRECONDITION if it already has an Attach stream.
  absl::StatusOr<std::shared_ptr<Session>> Attach(absl::string_view id);
  // The Attach stream of `id` ended: closes the session (if still open).
  void Detach(absl::string_view id);

  // Closes the sessions idle since before `now - idle_timeout` and not
  // attached; returns how many. The timer calls this; tests may too.
  size_t ExpireIdle(absl::Time now);

  size_t size() const;
  absl::Duration idle_timeout() const { return idle_timeout_; }

 private:
  std::shared_ptr<Session> Remove(absl::string_view id);
  // Sessions were closed: the timer trims the heap.
  void RequestTrim();
  bool TimerWake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || timer_wake_;
  }
  void TimerLoop();

  // Constant after construction.
  const absl::Duration idle_timeout_;
  const size_t max_sessions_;
  const uint64_t session_quota_;
  const std::shared_ptr<MemoryAccount> budget_;

  // Handle counter shared by the sessions (session.h).
  std::atomic<uint64_t> next_handle_{1};

  // State below is protected by mu_.
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> attached_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Admission admission_ ABSL_GUARDED_BY(mu_) = Admission::kOpen;
  // A trim is due once the throttle allows; the timer runs at once.
  bool trim_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool timer_wake_ ABSL_GUARDED_BY(mu_) = false;

  // Used by the timer thread only.
  HeapTrimmer trimmer_{absl::Seconds(1)};
  std::thread timer_;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_SESSION_MANAGER_H_
