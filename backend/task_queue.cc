#include "backend/task_queue.h"

#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/device.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<TaskQueue>> TaskQueue::Create(
    std::string name) {
  std::unique_ptr<TaskQueue> queue(new TaskQueue(std::move(name)));
  try {
    queue->worker_ = std::thread(&TaskQueue::WorkerLoop, queue.get());
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "[", queue->name_, "] cannot start a stream worker thread: ",
        e.what()));
  }
  return queue;
}

TaskQueue::~TaskQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

void TaskQueue::Enqueue(Task task) { Push({std::move(task), false}); }

void TaskQueue::EnqueueRecord(TicketEvent& event) {
  const uint64_t ticket = event.Record();
  Push({[this, &event, ticket] {
          event.Complete(ticket, status());
          return absl::OkStatus();
        },
        /*is_marker=*/true});
}

void TaskQueue::EnqueueWait(Event& event) {
  const std::string prefix = absl::StrCat(
      "[", name_, "] waiting for an event of ", event.device().name(), ": ");
  Enqueue([mark = event.Capture(), prefix]() -> absl::Status {
    absl::Status s = mark->Wait();
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
  });
}

absl::Status TaskQueue::Synchronize() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = queued_;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return finished_ >= target;
  };
  mu_.Await(absl::Condition(&done));
  return status_;
}

absl::Status TaskQueue::status() {
  absl::MutexLock lock(&mu_);
  return status_;
}

void TaskQueue::Push(Entry entry) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(entry));
  ++queued_;
}

void TaskQueue::WorkerLoop() {
  while (true) {
    Entry entry;
    bool skip = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and everything has run
      entry = std::move(queue_.front());
      queue_.pop_front();
      skip = !status_.ok() && !entry.is_marker;
    }
    absl::Status status = skip ? absl::OkStatus() : entry.run();
    // Free the task's captures before reporting it finished.
    entry.run = nullptr;
    absl::MutexLock lock(&mu_);
    if (!status.ok() && status_.ok()) status_ = std::move(status);
    ++finished_;
  }
}

}  // namespace tessera
