#include "backend/cpu/thread_pool.h"

#include <unistd.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "backend/testing/thread_count.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using testing::ThreadCount;
using testing::WaitForThreadCount;

constexpr absl::Duration kLinger = testing::kTestLinger;
constexpr absl::Duration kGone = testing::kGoneTimeout;

std::unique_ptr<ThreadPool> MakePool(int n, absl::Duration linger = kLinger) {
  absl::StatusOr<std::unique_ptr<ThreadPool>> pool =
      ThreadPool::Create(n, linger);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? std::move(*pool) : nullptr;
}

// Runs `pool` once; whether every thread index of a full team was called
// exactly once and saw the full team size.
bool RunsFullTeamOnce(ThreadPool& pool) {
  const int n = pool.max_size();
  std::vector<std::atomic<int>> calls(n);
  std::atomic<int> wrong_size{0};
  pool.Run([&](int ith) {
    calls[ith].fetch_add(1);
    if (pool.size() != n) wrong_size.fetch_add(1);
  });
  bool ok = wrong_size.load() == 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(calls[i].load(), 1) << n << " " << i;
    ok = ok && calls[i].load() == 1;
  }
  return ok;
}

TEST(ThreadPoolTest, RejectsZeroThreads) {
  EXPECT_EQ(ThreadPool::Create(0, kLinger).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ThreadPoolTest, RunCallsEveryThreadIndexOnce) {
  for (int n : {1, 2, 4}) {
    std::unique_ptr<ThreadPool> pool = MakePool(n);
    ASSERT_NE(pool, nullptr);
    ASSERT_EQ(pool->max_size(), n);
    for (int run = 0; run < 100; ++run) {
      ASSERT_TRUE(RunsFullTeamOnce(*pool)) << n << " " << run;
    }
  }
}

TEST(ThreadPoolTest, BarrierSeparatesRounds) {
  constexpr int kThreads = 3;
  constexpr int kRounds = 500;
  std::unique_ptr<ThreadPool> pool = MakePool(kThreads);
  ASSERT_NE(pool, nullptr);
  // Round r writes slot r of each thread; after the barrier every thread
  // checks that all threads wrote round r.
  std::vector<std::vector<int>> slots(kThreads, std::vector<int>(kRounds, -1));
  std::atomic<int> mismatches{0};
  pool->Run([&](int ith) {
    for (int r = 0; r < kRounds; ++r) {
      slots[ith][r] = r;
      pool->Barrier();
      for (int t = 0; t < kThreads; ++t) {
        if (slots[t][r] != r) mismatches.fetch_add(1);
      }
    }
  });
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ThreadPoolTest, HelpersStartOnRunAndExitWhenIdle) {
  const int baseline = ThreadCount(getpid());
  ASSERT_GT(baseline, 0);
  std::unique_ptr<ThreadPool> pool = MakePool(4);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(ThreadCount(getpid()), baseline);
  for (int round = 0; round < 3; ++round) {
    int during = -1;
    pool->Run([&](int ith) {
      if (ith == 0) during = ThreadCount(getpid());
    });
    EXPECT_EQ(during, baseline + 3) << round;
    EXPECT_EQ(WaitForThreadCount(getpid(), baseline, kGone), baseline) << round;
    // Helpers started again after they exited make a full team.
    EXPECT_TRUE(RunsFullTeamOnce(*pool)) << round;
  }
}

// Runs that come around the moment the helpers give up: every Run gets
// its full team, whether it meets the exiting helpers or new ones.
TEST(ThreadPoolTest, RunsRacingTheHelpersExitGetTheFullTeam) {
  const int baseline = ThreadCount(getpid());
  constexpr absl::Duration kShort = absl::Microseconds(200);
  std::unique_ptr<ThreadPool> pool = MakePool(3, kShort);
  ASSERT_NE(pool, nullptr);
  for (int run = 0; run < 300; ++run) {
    ASSERT_TRUE(RunsFullTeamOnce(*pool)) << run;
    absl::SleepFor(kShort * (run % 5) / 2);
  }
  EXPECT_EQ(WaitForThreadCount(getpid(), baseline, kGone), baseline);
}

TEST(ThreadPoolTest, DestructionJoinsRunningHelpers) {
  const int baseline = ThreadCount(getpid());
  {
    std::unique_ptr<ThreadPool> pool = MakePool(4, absl::InfiniteDuration());
    ASSERT_NE(pool, nullptr);
    ASSERT_TRUE(RunsFullTeamOnce(*pool));
    EXPECT_EQ(ThreadCount(getpid()), baseline + 3);
  }
  EXPECT_EQ(ThreadCount(getpid()), baseline);
}

}  // namespace
}  // namespace tessera
