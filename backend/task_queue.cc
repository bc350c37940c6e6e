#include "backend/task_queue.h"

#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/device.h"
#include "backend/spin.h"

namespace tessera {

std::unique_ptr<TaskQueue> TaskQueue::Create(std::string name,
                                             absl::Duration linger,
                                             Runner runner) {
  return std::unique_ptr<TaskQueue>(
      new TaskQueue(std::move(name), linger, runner));
}

TaskQueue::~TaskQueue() {
  std::thread worker;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    ready_.store(true, std::memory_order_release);
    worker = std::move(worker_);
  }
  if (worker.joinable()) worker.join();
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
    // The other stream usually finishes within microseconds of this one
    // reaching the wait (a split boundary, a collective's members): polling
    // first saves a sleeping thread's wake-up.
    SpinUntil([&mark] { return mark->IsDone(); });
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
  std::thread stopped;
  bool drain_here = false;
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(entry));
    ready_.store(true, std::memory_order_release);
    ++queued_;
    if (draining_) return;
    draining_ = true;
    if (runner_ == Runner::kCaller) {
      drain_here = true;
    } else {
      // The previous worker, if any, has stopped draining: it only has to
      // return, and is joined below.
      stopped = std::move(worker_);
      try {
        worker_ = std::thread(&TaskQueue::Drain, this, /*linger=*/true);
      } catch (const std::system_error& e) {
        if (status_.ok()) {
          status_ = absl::ResourceExhaustedError(absl::StrCat(
              "[", name_, "] cannot start a stream worker thread: ", e.what()));
        }
        // The drain skips every task and completes the recordings, so it
        // returns promptly.
        drain_here = true;
      }
    }
  }
  if (stopped.joinable()) stopped.join();
  if (drain_here) Drain(/*linger=*/false);
}

void TaskQueue::Drain(bool linger) {
  while (true) {
    // A stream's next task usually follows within microseconds (the next
    // request of a client that waited for this one, the next graph of a
    // pipeline): polling first saves a sleeping thread's wake-up.
    if (linger) {
      SpinUntil([this] { return ready_.load(std::memory_order_acquire); },
                kWorkerSpinTime);
    }
    Entry entry;
    bool skip = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stopping_;
      };
      if (linger) mu_.AwaitWithTimeout(absl::Condition(&ready), linger_);
      if (queue_.empty()) {
        // Idle for the linger, stopping with everything run, or (without
        // linger) done: the next Push starts a worker again.
        draining_ = false;
        return;
      }
      entry = std::move(queue_.front());
      queue_.pop_front();
      ready_.store(!queue_.empty() || stopping_, std::memory_order_release);
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
