#ifndef TESSERA_BACKEND_TESTING_THREAD_COUNT_H_
#define TESSERA_BACKEND_TESTING_THREAD_COUNT_H_

#include <sys/types.h>

#include "absl/time/time.h"

namespace tessera::testing {

// The threads of process `pid` (the entries of /proc/PID/task); -1 when
// they cannot be listed.
int ThreadCount(pid_t pid);

// Polls ThreadCount(pid) until it is at most `at_most` or `timeout` has
// passed; returns the last count.
int WaitForThreadCount(pid_t pid, int at_most, absl::Duration timeout);

}  // namespace tessera::testing

#endif  // TESSERA_BACKEND_TESTING_THREAD_COUNT_H_
