#include "server/rpc/drain_notice.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera::server {
namespace {

TEST(DrainNoticeTest, CallsEachListenerOnceWhenAnnounced) {
  DrainNotice notice;
  int a = 0, b = 0;
  notice.Add([&] { ++a; });
  notice.Add([&] { ++b; });
  EXPECT_EQ(a + b, 0);
  notice.Announce();
  notice.Announce();
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
}

TEST(DrainNoticeTest, ALateListenerIsCalledAtOnce) {
  DrainNotice notice;
  notice.Announce();
  int calls = 0;
  notice.Add([&] { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST(DrainNoticeTest, ARemovedListenerIsNotCalled) {
  DrainNotice notice;
  int kept = 0, removed = 0;
  notice.Add([&] { ++kept; });
  notice.Remove(notice.Add([&] { ++removed; }));
  notice.Announce();
  EXPECT_EQ(kept, 1);
  EXPECT_EQ(removed, 0);
}

TEST(DrainNoticeTest, RemoveWaitsForTheCallInProgress) {
  DrainNotice notice;
  absl::Notification entered;
  std::atomic<bool> returned{false};
  const uint64_t id = notice.Add([&] {
    entered.Notify();
    absl::SleepFor(absl::Milliseconds(100));
    returned = true;
  });
  std::thread announcer([&] { notice.Announce(); });
  entered.WaitForNotification();
  notice.Remove(id);
  EXPECT_TRUE(returned);
  announcer.join();
}

}  // namespace
}  // namespace tessera::server
