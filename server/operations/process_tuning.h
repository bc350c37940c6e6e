#ifndef TESSERA_SERVER_OPERATIONS_PROCESS_TUNING_H_
#define TESSERA_SERVER_OPERATIONS_PROCESS_TUNING_H_

namespace tessera::server {

// Process-wide settings for a process that moves tensors over gRPC; call
// once, early in main, before other threads start.
//
// - The allocator keeps freed memory instead of giving it back to the
//   kernel. gRPC receives every message into freshly allocated slices of up
//   to a few MiB; by default glibc returns such memory to the kernel as soon
//   as it is freed, so the next message faults in and zeroes new pages (on a
//   virtual machine that is several times slower than the copy itself).
// - absl::Mutex skips its deadlock-cycle detection, which in a library built
//   without NDEBUG takes one process-wide lock around every lock and unlock.
void TuneProcess();

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_PROCESS_TUNING_H_
