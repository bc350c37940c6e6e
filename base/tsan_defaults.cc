// ThreadSanitizer's options and suppressions, compiled into every binary
// of `bazel test --config=tsan` (.bazelrc links this library into each one),
// so that they hold wherever the binary runs: under a test, or as a daemon
// a test starts with an environment of its own. Empty in other builds.

#if defined(__SANITIZE_THREAD__)

extern "C" const char* __tsan_default_options() {
  // Stop at the first report: a race fails the process, and a daemon's
  // race fails the test that started it.
  return "halt_on_error=1:second_deadlock_stack=1";
}

extern "C" const char* __tsan_default_suppressions() {
  return
      // Abseil's Mutex hides its own synchronization from TSan on purpose,
      // so a waiter's thread identity, allocated by one thread and later
      // woken through its semaphore by another, looks like a race on the
      // waiter's futex word (google/sanitizers#953). Both accesses are
      // Abseil's.
      "race:absl::*::synchronization_internal::Waiter::Post\n"
      // Abseil evaluates a waiter's Condition in the thread that unlocks
      // and means TSan to ignore that evaluation's memory accesses; GCC
      // builds of Abseil lack the ignore annotations, so the Condition on
      // the waiter's stack (and what its predicate reads under the lock)
      // looks raced.
      "race:absl::*::Condition::CastAndCall*\n"
      // gRPC's own threads (its executor, timers, resolvers) outlive a
      // process that ends without shutting gRPC down, which is fine.
      "thread:grpc_core::Thread::Thread\n";
}

#endif  // __SANITIZE_THREAD__
