#include "backend/spin.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

TEST(SpinTest, ReturnsAtOnceWhenDone) {
  int checks = 0;
  EXPECT_TRUE(SpinUntil([&] { return ++checks > 0; }));
  EXPECT_EQ(checks, 1);
}

TEST(SpinTest, GivesUpWhenTheBudgetHasPassed) {
  constexpr std::chrono::microseconds kBudget{2000};
  const auto start = Clock::now();
  EXPECT_FALSE(SpinUntil([] { return false; }, kBudget));
  EXPECT_GE(Clock::now() - start, kBudget);
}

TEST(SpinTest, SeesAChangeMadeByAnotherThread) {
  std::atomic<bool> flag = false;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    flag = true;
  });
  // A budget the change comes well within.
  const bool seen =
      SpinUntil([&] { return flag.load(); }, std::chrono::seconds(10));
  setter.join();
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace tessera
