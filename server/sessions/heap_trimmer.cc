#include "server/sessions/heap_trimmer.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace tessera::server {

bool HeapTrimmer::TrimIfDue(absl::Time now) {
  if (now - last_trim_ < min_interval_) return false;
  last_trim_ = now;
#if defined(__GLIBC__)
  const absl::Time start = absl::Now();
  const int released = malloc_trim(0);
  spdlog::debug("heap trimmed in {} ({})",
                absl::FormatDuration(absl::Now() - start),
                released ? "memory given back" : "nothing to give back");
#endif
  return true;
}

}  // namespace tessera::server
