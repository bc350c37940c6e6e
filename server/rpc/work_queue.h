#ifndef TESSERA_SERVER_RPC_WORK_QUEUE_H_
#define TESSERA_SERVER_RPC_WORK_QUEUE_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tessera::server {

// A fixed pool of threads running posted tasks, scheduled per session: the
// service moves long requests (compute, copies) off gRPC's callback threads.
//
// Each task is posted under a key (the session id). Tasks of one key start
// in the order posted (several may run at once on free threads); between
// keys a free thread takes the next task of the key with the fewest tasks
// running, the longest-waiting key first among equals (round-robin). So one
// session's backlog never delays another's: a task of a key with nothing
// running waits at most for one running task to end, however many tasks other
// keys have queued. Thread-safe.
class WorkQueue {
 public:
  explicit WorkQueue(int n_threads);
  // Runs the tasks already posted, then joins the threads.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task` for `key`. Keys longer than kMaxKeyBytes are cut to that
  // length (session ids are far shorter).
  void Post(absl::string_view key, std::function<void()> task);

  static constexpr size_t kMaxKeyBytes = 128;

  // The pool's threads.
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  // The tasks of one key.
  struct Lane {
    std::deque<std::function<void()>> tasks;
    int running = 0;
  };

  void Loop();
  // The key whose task runs next (turn_ must not be empty).
  std::string Pick() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  // Lanes with tasks queued or running; a lane goes when it has neither.
  absl::flat_hash_map<std::string, Lane> lanes_ ABSL_GUARDED_BY(mu_);
  // Keys with tasks queued, the longest-waiting first.
  std::deque<std::string> turn_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_WORK_QUEUE_H_
