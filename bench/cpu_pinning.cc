#include "bench/cpu_pinning.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera::bench {
namespace {

cpu_set_t SetOf(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  return set;
}

absl::Status Failed(const std::string& what, const std::vector<int>& cpus,
                    int error) {
  return absl::InternalError(absl::StrCat("pinning ", what, " to CPUs ",
                                          absl::StrJoin(cpus, ","), ": ",
                                          std::strerror(error)));
}

}  // namespace

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

absl::Status PinCallingThread(const std::vector<int>& cpus) {
  const cpu_set_t set = SetOf(cpus);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return Failed("this thread", cpus, errno);
  }
  return absl::OkStatus();
}

absl::Status PinThread(std::thread& thread, const std::vector<int>& cpus) {
  const cpu_set_t set = SetOf(cpus);
  if (const int error =
          pthread_setaffinity_np(thread.native_handle(), sizeof(set), &set);
      error != 0) {
    return Failed("a thread", cpus, error);
  }
  return absl::OkStatus();
}

absl::Status PinProcess(pid_t pid, const std::vector<int>& cpus) {
  const cpu_set_t set = SetOf(cpus);
  std::error_code error;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    const pid_t tid = std::atoi(task.path().filename().c_str());
    // A thread may exit between the listing and here.
    if (sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH) {
      return Failed(absl::StrCat("thread ", tid, " of process ", pid), cpus,
                    errno);
    }
  }
  if (error) {
    return Failed(absl::StrCat("process ", pid), cpus, error.value());
  }
  return absl::OkStatus();
}

}  // namespace tessera::bench
