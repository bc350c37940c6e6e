#ifndef TESSERA_BACKEND_SPIN_H_
#define TESSERA_BACKEND_SPIN_H_

// Busy-waiting before sleeping, for waits that usually end within
// microseconds: a node of a thread team, a stream's next task, an event's
// completion (another stream at a split boundary, a short graph). Waking a
// sleeping thread costs tens of microseconds on a virtual machine, a
// bounded spin a few.

#include <chrono>
#include <thread>

namespace tessera {

// Long enough to bridge the gap between two small nodes, two graphs queued
// back to back or a small split boundary, short enough not to burn a core
// when work goes idle.
inline constexpr std::chrono::microseconds kSpinTime{80};
// A stream's worker waits longer for its next task: a client that waits for
// each result sends the next request a network round trip after the
// previous task ends, which on a VM whose idle vCPUs halt is longer than
// kSpinTime bridges. bench/rtt, registered Execute of a 1-op graph, daemon
// and client on a 2-vCPU Zen 4 VM, six alternating rounds: 90-115 us with a
// spin of this length against 112-149 us with one of kSpinTime.
inline constexpr std::chrono::microseconds kWorkerSpinTime{300};
// Every kYieldEvery-th pause is a yield of the core: on a machine with more
// runnable threads than cores, the thread being waited for may need this
// one's core. Measured with bench/pipeline on a 2-core VM while a compiler
// ran beside it: a split boundary cost 9 us sleeping, 61 us with a pure
// spin and 6-7 us with these yields (0.4-2.8 us on the idle machine).
inline constexpr int kYieldEvery = 32;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() is true or `budget` has passed by the clock; returns
// done(). By the clock, not by a count of pauses: each yield lasts as long
// as the other runnable threads keep the core, so on a busy 2-vCPU VM 2048
// pauses lasted 90-93 ms instead of 80 us, the waiter all that time in the
// run queue beside the work it waits for.
template <typename Done>
bool SpinUntil(Done done, std::chrono::microseconds budget = kSpinTime) {
  const auto give_up = std::chrono::steady_clock::now() + budget;
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (i % kYieldEvery != 0) {
      CpuRelax();
      continue;
    }
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() >= give_up) return done();
  }
}

}  // namespace tessera

#endif  // TESSERA_BACKEND_SPIN_H_
