#include "server/rpc/work_queue.h"

#include <algorithm>
#include <utility>

namespace tessera::server {

WorkQueue::WorkQueue(int n_threads) {
  n_threads = std::max(n_threads, 1);
  threads_.reserve(n_threads);
  for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkQueue::~WorkQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

void WorkQueue::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

void WorkQueue::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return q->stopping_ || !q->tasks_.empty();
          },
          this));
      if (tasks_.empty()) return;  // stopping, nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace tessera::server
