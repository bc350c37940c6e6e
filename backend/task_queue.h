#ifndef TESSERA_BACKEND_TASK_QUEUE_H_
#define TESSERA_BACKEND_TASK_QUEUE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/event.h"
#include "backend/ticket_event.h"

namespace tessera {

// The in-order queue behind a Stream whose work runs on a thread of its own:
// a worker runs tasks first in, first out. The first task that fails makes
// its status sticky: later tasks are skipped, except event recordings, which
// always run so that waiters learn the status. Destruction runs what is
// queued, then joins the worker. Thread-safe.
class TaskQueue {
 public:
  using Task = absl::AnyInvocable<absl::Status()>;

  // `name` names the queue in errors (e.g. the device). Errors:
  // RESOURCE_EXHAUSTED when the worker thread cannot be started.
  static absl::StatusOr<std::unique_ptr<TaskQueue>> Create(std::string name);
  ~TaskQueue();
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  void Enqueue(Task task);
  // Starts a recording of `event` that completes, with the sticky status,
  // when the worker reaches it.
  void EnqueueRecord(TicketEvent& event);
  // Makes later tasks wait for `event` (of any device) as recorded now
  // (Event::Capture): a later recording must not delay this queue. A failed
  // event fails it.
  void EnqueueWait(Event& event);
  // Blocks until every task queued so far has run; returns the sticky
  // status.
  absl::Status Synchronize();
  // The sticky status now.
  absl::Status status();

 private:
  struct Entry {
    Task run;
    bool is_marker = false;
  };

  explicit TaskQueue(std::string name) : name_(std::move(name)) {}
  void Push(Entry entry);
  void WorkerLoop();

  const std::string name_;
  absl::Mutex mu_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;    // tasks ever queued
  uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;  // tasks ever finished
  absl::Status status_ ABSL_GUARDED_BY(mu_);    // sticky: first error
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Started last in Create, joined first in the destructor.
  std::thread worker_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_TASK_QUEUE_H_
