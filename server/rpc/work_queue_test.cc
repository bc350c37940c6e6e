#include "server/rpc/work_queue.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tessera::server {
namespace {

// Records the order tasks ran in.
class Log {
 public:
  void Add(std::string entry) {
    absl::MutexLock lock(&mu_);
    entries_.push_back(std::move(entry));
  }
  std::vector<std::string> entries() {
    absl::MutexLock lock(&mu_);
    return entries_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> entries_;
};

TEST(WorkQueueTest, AnotherKeyWaitsForOneRunningTaskNotTheBacklog) {
  Log log;
  absl::Notification release;
  {
    WorkQueue queue(1);
    queue.Post("a", [&] {
      release.WaitForNotification();
      log.Add("a0");
    });
    for (int i = 1; i <= 12; ++i) {
      queue.Post("a", [&log, i] { log.Add("a" + std::to_string(i)); });
    }
    queue.Post("b", [&] { log.Add("b"); });
    release.Notify();
  }  // runs everything, then joins
  // Where the worker took a0 decides whether a1 was queued before b: a
  // key whose lane emptied when its task was taken rejoins the turn with
  // its next task. Either way b waits for at most one more task of a, never
  // for a's backlog, and a's tasks keep their order.
  const std::vector<std::string> order = log.entries();
  ASSERT_EQ(order.size(), 14u);
  EXPECT_EQ(order[0], "a0");
  const auto b = std::find(order.begin(), order.end(), "b");
  EXPECT_LE(b - order.begin(), 2) << absl::StrJoin(order, " ");
  std::vector<std::string> a_tasks = order;
  a_tasks.erase(std::find(a_tasks.begin(), a_tasks.end(), "b"));
  for (int i = 0; i <= 12; ++i) EXPECT_EQ(a_tasks[i], "a" + std::to_string(i));
}

TEST(WorkQueueTest, KeysTakeTurnsAndEachKeepsItsOrder) {
  Log log;
  absl::Notification release;
  {
    WorkQueue queue(1);
    queue.Post("gate", [&] { release.WaitForNotification(); });
    for (int i = 0; i < 3; ++i) {
      for (const char* key : {"a", "b", "c"}) {
        queue.Post(key, [&log, key, i] {
          log.Add(std::string(key) + std::to_string(i));
        });
      }
    }
    release.Notify();
  }
  EXPECT_EQ(log.entries(),
            (std::vector<std::string>{"a0", "b0", "c0", "a1", "b1", "c1", "a2",
                                      "b2", "c2"}));
}

// With two threads, one held by a key's long task, a second key runs on the
// other thread before the first key's next task, although that was posted
// first.
TEST(WorkQueueTest, AFreeThreadPrefersTheKeyWithNothingRunning) {
  Log log;
  absl::Notification a_started, release_a, release_gate, b_ran;
  {
    WorkQueue queue(2);
    queue.Post("a", [&] {
      a_started.Notify();
      release_a.WaitForNotification();
      log.Add("a0");
    });
    a_started.WaitForNotification();
    queue.Post("gate", [&] { release_gate.WaitForNotification(); });
    queue.Post("a", [&] { log.Add("a1"); });
    queue.Post("b", [&] {
      log.Add("b");
      b_ran.Notify();
    });
    release_gate.Notify();
    b_ran.WaitForNotification();
    release_a.Notify();
  }
  // a1 may start once b is done (a free thread and nothing else queued),
  // while a0 still runs; b comes first either way.
  const std::vector<std::string> order = log.entries();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0], "b");
}

TEST(WorkQueueTest, LongKeysAreCutToOneLane) {
  Log log;
  absl::Notification release;
  const std::string long_key(1 << 20, 'k');
  {
    WorkQueue queue(1);
    queue.Post("gate", [&] { release.WaitForNotification(); });
    queue.Post(long_key, [&] { log.Add("long0"); });
    queue.Post(long_key.substr(0, WorkQueue::kMaxKeyBytes) + "x",
               [&] { log.Add("long1"); });
    queue.Post("b", [&] { log.Add("b"); });
    release.Notify();
  }
  EXPECT_EQ(log.entries(), (std::vector<std::string>{"long0", "b", "long1"}));
}

}  // namespace
}  // namespace tessera::server
