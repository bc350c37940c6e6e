#ifndef TESSERA_BACKEND_TESTING_THREAD_COUNT_H_
#define TESSERA_BACKEND_TESTING_THREAD_COUNT_H_

#include <sys/types.h>

#include "absl/time/time.h"

namespace tessera::testing {

// The idle linger that tests give worker threads: short enough for fast
// tests, long enough that back-to-back work meets a running worker.
inline constexpr absl::Duration kTestLinger = absl::Milliseconds(20);
// How long an idle worker may take to be gone: far above kTestLinger.
inline constexpr absl::Duration kGoneTimeout = absl::Seconds(5);

// The threads of process `pid` (the entries of /proc/PID/task); -1 when
// they cannot be listed.
int ThreadCount(pid_t pid);

// Polls ThreadCount(pid) until it is at most `at_most` or `timeout` has
// passed; returns the last count.
int WaitForThreadCount(pid_t pid, int at_most, absl::Duration timeout);

}  // namespace tessera::testing

#endif  // TESSERA_BACKEND_TESTING_THREAD_COUNT_H_
