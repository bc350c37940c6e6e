#include "server/operations/process_tuning.h"

#include <malloc.h>

#include "absl/synchronization/mutex.h"

namespace tessera::server {

void TuneProcess() {
  // Allocations up to 32 MiB (glibc's largest threshold) come from the
  // heap, and the heap keeps up to 1 GiB of free memory at its top.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // One arena: malloc_trim cannot shrink the others (see the header).
  mallopt(M_ARENA_MAX, 1);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace tessera::server
