#include "backend/cpu/thread_pool.h"

#include <atomic>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace tessera {
namespace {

std::unique_ptr<ThreadPool> MakePool(int n) {
  absl::StatusOr<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(n);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? std::move(*pool) : nullptr;
}

TEST(ThreadPoolTest, RejectsZeroThreads) {
  EXPECT_EQ(ThreadPool::Create(0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ThreadPoolTest, RunCallsEveryThreadIndexOnce) {
  for (int n : {1, 2, 4}) {
    std::unique_ptr<ThreadPool> pool = MakePool(n);
    ASSERT_NE(pool, nullptr);
    ASSERT_EQ(pool->size(), n);
    for (int run = 0; run < 100; ++run) {
      std::vector<std::atomic<int>> calls(n);
      pool->Run([&](int ith) { calls[ith].fetch_add(1); });
      for (int i = 0; i < n; ++i)
        EXPECT_EQ(calls[i].load(), 1) << n << " " << i;
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

}  // namespace
}  // namespace tessera
