#include "backend/task_queue.h"

#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "backend/cpu/cpu_device.h"
#include "backend/testing/thread_count.h"
#include "backend/ticket_event.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using testing::ThreadCount;
using testing::WaitForThreadCount;

constexpr absl::Duration kLinger = testing::kTestLinger;
constexpr absl::Duration kGone = testing::kGoneTimeout;

// Tasks append their index to `ran`.
struct Log {
  absl::Mutex mu;
  std::vector<int> ran ABSL_GUARDED_BY(mu);

  TaskQueue::Task Append(int i) {
    return [this, i] {
      absl::MutexLock lock(&mu);
      ran.push_back(i);
      return absl::OkStatus();
    };
  }
  std::vector<int> Ran() {
    absl::MutexLock lock(&mu);
    return ran;
  }
};

std::vector<int> Iota(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(TaskQueueTest, AnIdleQueueHasNoThread) {
  const int baseline = ThreadCount(getpid());
  ASSERT_GT(baseline, 0);
  std::unique_ptr<TaskQueue> queue = TaskQueue::Create("q", kLinger);
  EXPECT_EQ(ThreadCount(getpid()), baseline);

  // A worker runs the work, on a thread other than the pusher's.
  absl::Notification release;
  std::thread::id worker;
  queue->Enqueue([&] {
    worker = std::this_thread::get_id();
    release.WaitForNotification();
    return absl::OkStatus();
  });
  EXPECT_EQ(ThreadCount(getpid()), baseline + 1);
  release.Notify();
  ASSERT_TRUE(queue->Synchronize().ok());
  EXPECT_NE(worker, std::this_thread::get_id());
  // Idle past the linger, it is gone, while the queue lives on.
  EXPECT_EQ(WaitForThreadCount(getpid(), baseline, kGone), baseline);
}

TEST(TaskQueueTest, WorkAfterTheWorkerExitedRunsInOrder) {
  const int baseline = ThreadCount(getpid());
  std::unique_ptr<TaskQueue> queue = TaskQueue::Create("q", kLinger);
  Log log;
  for (int i = 0; i < 50; ++i) queue->Enqueue(log.Append(i));
  ASSERT_TRUE(queue->Synchronize().ok());
  ASSERT_EQ(WaitForThreadCount(getpid(), baseline, kGone), baseline);
  for (int i = 50; i < 100; ++i) queue->Enqueue(log.Append(i));
  ASSERT_TRUE(queue->Synchronize().ok());
  EXPECT_EQ(log.Ran(), Iota(100));
}

// Pushes that land around the moment the worker gives up: each is run
// exactly once, in order, whether it meets the exiting worker or a new one.
TEST(TaskQueueTest, PushesRacingTheWorkersExitRunInOrder) {
  const int baseline = ThreadCount(getpid());
  constexpr absl::Duration kShort = absl::Microseconds(200);
  std::unique_ptr<TaskQueue> queue = TaskQueue::Create("q", kShort);
  Log log;
  constexpr int kRounds = 300;
  for (int i = 0; i < kRounds; ++i) {
    queue->Enqueue(log.Append(i));
    // Alternately waits for the task and lets the next push race it, with
    // pauses on both sides of the linger.
    if (i % 2 == 0) {
      ASSERT_TRUE(queue->Synchronize().ok());
    }
    absl::SleepFor(kShort * (i % 5) / 2);
  }
  ASSERT_TRUE(queue->Synchronize().ok());
  EXPECT_EQ(log.Ran(), Iota(kRounds));
  EXPECT_EQ(WaitForThreadCount(getpid(), baseline, kGone), baseline);
}

TEST(TaskQueueTest, TheFirstErrorIsStickyAcrossWorkersAndReachesRecordings) {
  CpuDevice device({.name = "cpu0", .n_threads = 1, .memory_limit = 0});
  const int baseline = ThreadCount(getpid());
  std::unique_ptr<TaskQueue> queue = TaskQueue::Create("q", kLinger);
  TicketEvent before(device);
  TicketEvent after(device);
  Log log;
  queue->Enqueue(log.Append(0));
  queue->EnqueueRecord(before);
  queue->Enqueue([] { return absl::DataLossError("first"); });
  queue->Enqueue([] { return absl::InternalError("never runs"); });
  queue->Enqueue(log.Append(1));  // skipped
  queue->EnqueueRecord(after);
  const absl::Status status = queue->Synchronize();
  EXPECT_EQ(status, absl::DataLossError("first"));
  EXPECT_TRUE(before.Synchronize().ok());
  EXPECT_EQ(after.Synchronize(), status);
  EXPECT_EQ(log.Ran(), std::vector<int>{0});

  // A new worker keeps the status: its tasks are skipped, its recordings
  // complete with the first error.
  ASSERT_EQ(WaitForThreadCount(getpid(), baseline, kGone), baseline);
  queue->Enqueue(log.Append(2));
  queue->EnqueueRecord(after);
  EXPECT_EQ(queue->Synchronize(), status);
  EXPECT_EQ(after.Synchronize(), status);
  EXPECT_EQ(queue->status(), status);
  EXPECT_EQ(log.Ran(), std::vector<int>{0});
}

TEST(TaskQueueTest, DestructionRunsWhatIsQueuedThenJoins) {
  const int baseline = ThreadCount(getpid());
  Log log;
  {
    std::unique_ptr<TaskQueue> queue =
        TaskQueue::Create("q", absl::InfiniteDuration());
    for (int i = 0; i < 20; ++i) {
      queue->Enqueue([&log, i] {
        absl::SleepFor(absl::Milliseconds(1));
        return log.Append(i)();
      });
    }
  }
  EXPECT_EQ(log.Ran(), Iota(20));
  EXPECT_EQ(ThreadCount(getpid()), baseline);
}

TEST(TaskQueueTest, ManyQueuesLeaveNoThreadsWhenIdle) {
  const int baseline = ThreadCount(getpid());
  constexpr int kQueues = 200;
  std::vector<std::unique_ptr<TaskQueue>> queues;
  Log log;
  for (int q = 0; q < kQueues; ++q) {
    queues.push_back(TaskQueue::Create("q", kLinger));
    queues.back()->Enqueue(log.Append(q));
  }
  for (std::unique_ptr<TaskQueue>& queue : queues) {
    ASSERT_TRUE(queue->Synchronize().ok());
  }
  EXPECT_EQ(log.Ran().size(), size_t{kQueues});
  EXPECT_EQ(WaitForThreadCount(getpid(), baseline, kGone), baseline);
}

TEST(TaskQueueTest, ACallerRunQueueRunsEachTaskOnThePushingThread) {
  CpuDevice device({.name = "cpu0", .n_threads = 1, .memory_limit = 0});
  const int baseline = ThreadCount(getpid());
  std::unique_ptr<TaskQueue> queue =
      TaskQueue::Create("q", kLinger, TaskQueue::Runner::kCaller);
  Log log;
  std::thread::id runner;
  queue->Enqueue([&] {
    runner = std::this_thread::get_id();
    return log.Append(0)();
  });
  // Done when Enqueue returns, on this thread, with no thread started.
  EXPECT_EQ(log.Ran(), std::vector<int>{0});
  EXPECT_EQ(runner, std::this_thread::get_id());
  EXPECT_EQ(ThreadCount(getpid()), baseline);
  TicketEvent done(device);
  queue->EnqueueRecord(done);
  EXPECT_TRUE(done.IsDone());

  // The first error is sticky as with a worker.
  queue->Enqueue([] { return absl::DataLossError("first"); });
  queue->Enqueue(log.Append(1));  // skipped
  queue->EnqueueRecord(done);
  EXPECT_TRUE(done.IsDone());
  EXPECT_EQ(done.Synchronize(), absl::DataLossError("first"));
  EXPECT_EQ(queue->Synchronize(), absl::DataLossError("first"));
  EXPECT_EQ(log.Ran(), std::vector<int>{0});
  EXPECT_EQ(ThreadCount(getpid()), baseline);
}

// Threads pushing at once onto a caller-run queue: a push that finds
// another thread running the queue's tasks leaves its task to that thread,
// so every task runs exactly once, one at a time, each thread's in its
// order.
TEST(TaskQueueTest, ACallerRunQueueRunsConcurrentPushesOneAtATime) {
  std::unique_ptr<TaskQueue> queue =
      TaskQueue::Create("q", kLinger, TaskQueue::Runner::kCaller);
  constexpr int kThreads = 4;
  constexpr int kTasks = 2000;
  std::atomic<int> running = 0;
  std::atomic<bool> overlapped = false;
  Log logs[kThreads];
  std::vector<std::thread> pushers;
  for (int t = 0; t < kThreads; ++t) {
    pushers.emplace_back([&, t] {
      for (int i = 0; i < kTasks; ++i) {
        queue->Enqueue([&, t, i] {
          if (running.fetch_add(1) != 0) overlapped = true;
          absl::Status s = logs[t].Append(i)();
          running.fetch_sub(1);
          return s;
        });
      }
    });
  }
  for (std::thread& pusher : pushers) pusher.join();
  ASSERT_TRUE(queue->Synchronize().ok());
  EXPECT_FALSE(overlapped);
  for (Log& log : logs) EXPECT_EQ(log.Ran(), Iota(kTasks));
}

}  // namespace
}  // namespace tessera
