#ifndef TESSERA_SERVER_SESSIONS_HEAP_TRIMMER_H_
#define TESSERA_SERVER_SESSIONS_HEAP_TRIMMER_H_

#include "absl/time/time.h"

namespace tessera::server {

// Gives the C heap's free memory back to the system with glibc's
// malloc_trim: the free top of the main heap and every whole free page in
// every arena (not the free top of the other arenas, which is why
// TuneProcess keeps the process to one arena). glibc keeps what is freed,
// all the more as TuneProcess (server/operations/process_tuning.h) raises
// its thresholds so that gRPC messages reuse memory; so once the sessions
// of a busy period close, the daemon would otherwise stay at its peak RSS.
//
// A trim walks every arena with its lock held, stalling allocations in
// other threads meanwhile, and pages given back fault in again when used:
// trims are at most one per `min_interval`. Elsewhere than glibc a trim does
// nothing. Not thread-safe (one thread, the session timer, calls it).
class HeapTrimmer {
 public:
  explicit HeapTrimmer(absl::Duration min_interval)
      : min_interval_(min_interval) {}

  // Trims unless the last trim was less than `min_interval` before `now`;
  // returns whether it trimmed.
  bool TrimIfDue(absl::Time now);

 private:
  const absl::Duration min_interval_;
  absl::Time last_trim_ = absl::InfinitePast();
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_HEAP_TRIMMER_H_
