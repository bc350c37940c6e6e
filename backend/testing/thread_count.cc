#include "backend/testing/thread_count.h"

#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera::testing {

int ThreadCount(pid_t pid) {
  std::error_code error;
  std::filesystem::directory_iterator it(absl::StrCat("/proc/", pid, "/task"),
                                         error);
  if (error) return -1;
  int count = 0;
  while (it != std::filesystem::directory_iterator()) {
    ++count;
    it.increment(error);
    if (error) return -1;
  }
  return count;
}

int WaitForThreadCount(pid_t pid, int at_most, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int count = ThreadCount(pid);
  while (count > at_most && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    count = ThreadCount(pid);
  }
  return count;
}

}  // namespace tessera::testing
