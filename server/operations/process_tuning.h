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
//   What sessions leave behind goes back when they close (HeapTrimmer,
//   server/sessions/heap_trimmer.h). That needs the allocator's one main
//   arena: malloc_trim gives back the free top of the main heap only, and
//   with the 1 GiB threshold the per-thread arenas glibc would otherwise add
//   (up to 8 per core) would each keep their peak. The threads share the
//   arena's lock; small blocks still come from per-thread caches.
// - absl::Mutex skips its deadlock-cycle detection, which in a library built
//   without NDEBUG takes one process-wide lock around every lock and unlock.
void TuneProcess();

}  // namespace tessera::server

#endif  // TESSERA_SERVER_OPERATIONS_PROCESS_TUNING_H_
