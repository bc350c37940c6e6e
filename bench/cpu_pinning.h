#ifndef TESSERA_BENCH_CPU_PINNING_H_
#define TESSERA_BENCH_CPU_PINNING_H_

// Pins threads to CPUs, so that a round trip between two threads (or a
// thread and a daemon) is measured with both ends on one CPU, or each on a
// CPU of its own, rather than wherever the scheduler put them. On a VM the
// two differ by several times: a wake-up across vCPUs costs an interrupt
// to a halted vCPU; one on the same vCPU is a context switch.

#include <sys/types.h>

#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace tessera::bench {

// The CPUs this thread may run on, in ascending order.
std::vector<int> AllowedCpus();

// Restricts the calling thread to `cpus`.
absl::Status PinCallingThread(const std::vector<int>& cpus);
// Restricts `thread` to `cpus`.
absl::Status PinThread(std::thread& thread, const std::vector<int>& cpus);
// Restricts every thread of process `pid` to `cpus`; threads it starts
// later inherit the set of the thread that starts them.
absl::Status PinProcess(pid_t pid, const std::vector<int>& cpus);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_CPU_PINNING_H_
