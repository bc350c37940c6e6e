#ifndef TESSERA_SERVER_RPC_WORK_QUEUE_H_
#define TESSERA_SERVER_RPC_WORK_QUEUE_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tessera::server {

// A fixed pool of threads running posted tasks in FIFO order: the service
// moves long requests (compute, copies) off gRPC's callback threads.
// Thread-safe.
class WorkQueue {
 public:
  explicit WorkQueue(int n_threads);
  // Runs the tasks already posted, then joins the threads.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Post(std::function<void()> task);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_WORK_QUEUE_H_
