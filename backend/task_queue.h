#ifndef TESSERA_BACKEND_TASK_QUEUE_H_
#define TESSERA_BACKEND_TASK_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "backend/event.h"
#include "backend/ticket_event.h"

namespace tessera {

// The in-order queue behind a Stream whose work runs on a thread of its own:
// a worker runs tasks first in, first out. The first task that fails makes
// its status sticky: later tasks are skipped, except event recordings, which
// always run so that waiters learn the status. Thread-safe.
//
// An idle queue costs no thread: the worker starts when work is queued and
// none runs, and exits once the queue has stayed empty for `linger` (a
// stream in use keeps its worker, so its latency is that of a persistent
// thread; the worker polls for the next task briefly, backend/spin.h,
// before it sleeps). When a worker cannot be started, the sticky status
// becomes RESOURCE_EXHAUSTED and the pushing thread drains the queue
// itself, every task skipped and every recording completed with that
// status: never an abort or a hang. Destruction runs what is queued, then
// joins the worker.
//
// A caller-run queue (Runner::kCaller) starts no worker: the thread that
// queues a task runs it, and whatever is queued before it, before Enqueue
// returns, unless another thread is running the queue's tasks already (that
// one then runs it too). For callers that wait for each piece of work
// anyway: it saves handing the work to a thread and back.
class TaskQueue {
 public:
  using Task = absl::AnyInvocable<absl::Status()>;

  // Who runs the tasks.
  enum class Runner { kWorker, kCaller };

  // How long an idle worker waits for more work before it exits.
  static constexpr absl::Duration kDefaultLinger = absl::Seconds(1);

  // `name` names the queue in errors (e.g. the device). Starts no thread.
  static std::unique_ptr<TaskQueue> Create(
      std::string name, absl::Duration linger = kDefaultLinger,
      Runner runner = Runner::kWorker);
  ~TaskQueue();
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  void Enqueue(Task task);
  // Starts a recording of `event` that completes, with the sticky status,
  // when the worker reaches it.
  void EnqueueRecord(TicketEvent& event);
  // Makes later tasks wait for `event` (of any device) as recorded now
  // (Event::Capture): a later recording must not delay this queue. A failed
  // event fails it. The worker polls the event briefly (backend/spin.h)
  // before it sleeps on it.
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

  TaskQueue(std::string name, absl::Duration linger, Runner runner)
      : name_(std::move(name)), linger_(linger), runner_(runner) {}
  // Queues `entry`; starts a worker when none runs, or drains the queue
  // here when the queue is caller-run or a worker cannot be started.
  void Push(Entry entry);
  // Runs entries in order while there are any; with `linger`, also waits
  // up to linger_ for more (the worker). Called with draining_ set by the
  // caller; clears it when it returns.
  void Drain(bool linger);

  const std::string name_;
  const absl::Duration linger_;
  const Runner runner_;
  absl::Mutex mu_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  // Whether queue_ has entries or stopping_ is set (Drain's wait
  // condition): written under mu_, polled without it by the worker before
  // it sleeps.
  std::atomic<bool> ready_ = false;
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;    // tasks ever queued
  uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;  // tasks ever finished
  absl::Status status_ ABSL_GUARDED_BY(mu_);    // sticky: first error
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Whether a thread (the worker, or a pusher of a caller-run queue or one
  // that could not start a worker) runs Drain: it decides under mu_ to stop,
  // so a Push either sees it draining and leaves the entry to it, or starts
  // the next worker.
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // The last worker started; once it has stopped draining it is joined by
  // the Push that starts the next one, or by the destructor.
  std::thread worker_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_TASK_QUEUE_H_
