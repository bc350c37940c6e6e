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

void WorkQueue::Post(absl::string_view key, std::function<void()> task) {
  key = key.substr(0, kMaxKeyBytes);
  absl::MutexLock lock(&mu_);
  Lane& lane = lanes_[key];
  if (lane.tasks.empty()) turn_.emplace_back(key);
  lane.tasks.push_back(std::move(task));
}

// The first key in turn order among those with the fewest tasks running.
std::string WorkQueue::Pick() {
  auto best = turn_.begin();
  for (auto it = turn_.begin(); it != turn_.end(); ++it) {
    if (lanes_.at(*it).running < lanes_.at(*best).running) best = it;
  }
  std::string key = std::move(*best);
  turn_.erase(best);
  return key;
}

// 1. Wait for a queued task (or for the stop with none left).
// 2. Take the picked key's oldest task; the key goes to the back of the
//    turn if it has more.
// 3. Run it unlocked, then drop the lane if it is idle and empty.
void WorkQueue::Loop() {
  while (true) {
    std::function<void()> task;
    std::string key;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return q->stopping_ || !q->turn_.empty();
          },
          this));
      if (turn_.empty()) return;  // stopping, nothing left
      key = Pick();
      Lane& lane = lanes_[key];
      task = std::move(lane.tasks.front());
      lane.tasks.pop_front();
      ++lane.running;
      if (!lane.tasks.empty()) turn_.push_back(key);
    }
    task();
    task = nullptr;
    absl::MutexLock lock(&mu_);
    auto it = lanes_.find(key);
    --it->second.running;
    if (it->second.running == 0 && it->second.tasks.empty()) lanes_.erase(it);
  }
}

}  // namespace tessera::server
