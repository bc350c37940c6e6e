#include "server/sessions/session_manager.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "backend/cpu/cpu_device.h"
#include "gtest/gtest.h"

namespace tessera::server {
namespace {

std::unique_ptr<Buffer> Alloc(CpuDevice& device, size_t size) {
  return device.buffer_type().Alloc(size).value();
}

// A buffer of `size` bytes added to `session` with its charge.
absl::StatusOr<uint64_t> Add(Session& session, CpuDevice& device,
                             size_t size) {
  absl::StatusOr<MemoryCharge> charge = session.Reserve(size, "test");
  if (!charge.ok()) return charge.status();
  return session.AddBuffer(Alloc(device, size), *std::move(charge));
}

TEST(SessionManagerTest, CreatesAndFindsSessions) {
  SessionManager manager(absl::ZeroDuration(), 8);
  auto a = manager.Create("a").value();
  auto b = manager.Create("b").value();
  EXPECT_NE(a->id(), b->id());
  EXPECT_EQ(a->id().size(), 32u);
  EXPECT_EQ(manager.Find(a->id()).value(), a);
  EXPECT_EQ(manager.Find(b->id()).value()->client_name(), "b");
  EXPECT_EQ(manager.size(), 2u);
  EXPECT_EQ(manager.Find("nope").status().code(), absl::StatusCode::kNotFound);
}

// The client name is for logs: it cannot forge lines or grow them without
// bound. Unknown ids in errors are bounded too.
TEST(SessionManagerTest, ClientTextIsMadeSafe) {
  SessionManager manager(absl::ZeroDuration(), 8);
  auto s = manager.Create("runner\n[info] session x closed").value();
  EXPECT_EQ(s->client_name(), "runner\\x0a[info] session x closed");
  auto long_name = manager.Create(std::string(1 << 20, 'n')).value();
  EXPECT_LT(long_name->client_name().size(), 300u);
  absl::Status missing = manager.Find(std::string(1 << 20, 'i')).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_LT(missing.message().size(), 300u);
}

TEST(SessionManagerTest, RefusesSessionsPastTheLimit) {
  SessionManager manager(absl::ZeroDuration(), 2);
  ASSERT_TRUE(manager.Create("a").ok());
  ASSERT_TRUE(manager.Create("b").ok());
  EXPECT_EQ(manager.Create("c").status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(SessionManagerTest, TakesSessionsOnlyWhileOpen) {
  SessionManager manager(absl::ZeroDuration(), 8);
  manager.SetAdmission(SessionManager::Admission::kStarting);
  absl::Status starting = manager.Create("a").status();
  EXPECT_EQ(starting.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(starting.message().find("opening its devices"),
            absl::string_view::npos);
  manager.SetAdmission(SessionManager::Admission::kOpen);
  auto a = manager.Create("a").value();
  manager.SetAdmission(SessionManager::Admission::kDraining);
  absl::Status draining = manager.Create("b").status();
  EXPECT_EQ(draining.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(draining.message().find("draining"), absl::string_view::npos);
  // The open session carries on.
  EXPECT_EQ(manager.Find(a->id()).value(), a);
}

TEST(SessionManagerTest, HandlesOfAnotherSessionAreNotFound) {
  CpuDevice device({});
  SessionManager manager(absl::ZeroDuration(), 8);
  auto a = manager.Create("a").value();
  auto b = manager.Create("b").value();
  const uint64_t ha = Add(*a, device, 64).value();
  const uint64_t hb = Add(*b, device, 64).value();
  EXPECT_NE(ha, hb);
  EXPECT_NE(ha, 0u);
  EXPECT_TRUE(a->FindBuffer(ha).ok());
  EXPECT_EQ(a->FindBuffer(hb).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b->FindBuffer(ha).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b->FreeBuffer(ha).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a->FindBuffer(0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a->FindGraph(ha).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(a->FindBuffer(ha).ok());  // still there
}

TEST(SessionManagerTest, FreeReturnsDeviceMemory) {
  CpuDevice device({});
  SessionManager manager(absl::ZeroDuration(), 8);
  auto s = manager.Create("a").value();
  const uint64_t h = Add(*s, device, 4096).value();
  EXPECT_EQ(device.memory_used(), 4096u);
  EXPECT_EQ(s->memory_held(), 4096u);
  ASSERT_TRUE(s->FreeBuffer(h).ok());
  EXPECT_EQ(device.memory_used(), 0u);
  EXPECT_EQ(s->FreeBuffer(h).code(), absl::StatusCode::kNotFound);
}

TEST(SessionManagerTest, CloseFreesEverythingAndForgetsTheSession) {
  CpuDevice device({});
  SessionManager manager(absl::ZeroDuration(), 8);
  auto s = manager.Create("a").value();
  const std::string id = s->id();
  const uint64_t h1 = Add(*s, device, 1000).value();
  Add(*s, device, 3000).value();
  bool told = false;
  s->SetCloseListener([&] { told = true; });
  EXPECT_EQ(device.memory_used(), 4000u);

  ASSERT_TRUE(manager.Close(id).ok());
  EXPECT_TRUE(told);
  EXPECT_EQ(device.memory_used(), 0u);
  EXPECT_TRUE(s->closed());
  EXPECT_EQ(s->FindBuffer(h1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Add(*s, device, 8).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(manager.Find(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager.Close(id).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(device.memory_used(), 0u);
}

TEST(SessionManagerTest, BufferInUseOutlivesCloseUntilReleased) {
  CpuDevice device({});
  SessionManager manager(absl::ZeroDuration(), 8);
  auto s = manager.Create("a").value();
  const uint64_t h = Add(*s, device, 512).value();
  std::shared_ptr<Buffer> in_use = s->FindBuffer(h).value();
  ASSERT_TRUE(manager.Close(s->id()).ok());
  EXPECT_EQ(device.memory_used(), 512u);
  in_use.reset();
  EXPECT_EQ(device.memory_used(), 0u);
}

// A freed buffer that something else still holds (a request, a registered
// graph) stays charged until it is really released.
TEST(SessionManagerTest, AFreedBufferHeldElsewhereStaysCharged) {
  CpuDevice device({});
  SessionManager manager(absl::ZeroDuration(), 8, /*session_quota=*/1000);
  auto s = manager.Create("a").value();
  const uint64_t h = Add(*s, device, 600).value();
  std::shared_ptr<Buffer> held = s->FindBuffer(h).value();
  ASSERT_TRUE(s->FreeBuffer(h).ok());
  EXPECT_EQ(s->memory_held(), 600u);
  EXPECT_EQ(Add(*s, device, 600).status().code(),
            absl::StatusCode::kResourceExhausted);
  held.reset();
  EXPECT_EQ(s->memory_held(), 0u);
  EXPECT_TRUE(Add(*s, device, 600).ok());
}

TEST(SessionManagerTest, QuotaAndDaemonBudgetBothBound) {
  auto budget = MemoryAccount::Create("the daemon", 1500);
  SessionManager manager(absl::ZeroDuration(), 8, /*session_quota=*/1000,
                         budget);
  auto a = manager.Create("a").value();
  auto b = manager.Create("b").value();
  MemoryCharge a1 = a->Reserve(800, "test").value();
  absl::Status over_quota = a->Reserve(300, "Compute").status();
  EXPECT_EQ(over_quota.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over_quota.message().find("[Compute] the session"),
            absl::string_view::npos)
      << over_quota;
  MemoryCharge b1 = b->Reserve(600, "test").value();
  absl::Status over_budget = b->Reserve(200, "AllocBuffer").status();
  EXPECT_EQ(over_budget.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over_budget.message().find("the daemon holds 1400 bytes"),
            absl::string_view::npos)
      << over_budget;
  // A refusal by the budget leaves the session's account as it was.
  EXPECT_EQ(b->memory_held(), 600u);
  EXPECT_EQ(budget->used(), 1400u);
  a1.Release();
  EXPECT_EQ(budget->used(), 600u);
  EXPECT_TRUE(b->Reserve(200, "test").ok());
}

TEST(SessionManagerTest, ExpiresIdleSessionsButNotAttachedOnes) {
  SessionManager manager(absl::Hours(1), 8);  // the timer never fires here
  auto idle = manager.Create("idle").value();
  auto other = manager.Create("other").value();
  auto attached = manager.Create("attached").value();
  ASSERT_TRUE(manager.Attach(attached->id()).ok());

  const absl::Time later = absl::Now() + absl::Minutes(59);
  EXPECT_EQ(manager.ExpireIdle(later), 0u);
  EXPECT_EQ(manager.ExpireIdle(absl::Now() + absl::Minutes(61)), 2u);
  EXPECT_TRUE(idle->closed());
  EXPECT_TRUE(other->closed());
  EXPECT_FALSE(attached->closed());
  EXPECT_EQ(manager.size(), 1u);
}

TEST(SessionManagerTest, TouchingKeepsASessionAlive) {
  SessionManager manager(absl::Hours(1), 8);
  auto s = manager.Create("a").value();
  const absl::Time created = absl::Now();
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(manager.Find(s->id()).ok());  // touches
  EXPECT_GT(s->last_used(), created);
  EXPECT_EQ(manager.ExpireIdle(s->last_used() + absl::Minutes(59)), 0u);
  EXPECT_EQ(manager.ExpireIdle(s->last_used() + absl::Minutes(61)), 1u);
}

TEST(SessionManagerTest, TimerClosesIdleSessionsAndFreesTheirMemory) {
  CpuDevice device({});
  SessionManager manager(absl::Milliseconds(50), 8);
  auto s = manager.Create("a").value();
  Add(*s, device, 2048).value();
  absl::Notification closed;
  s->SetCloseListener([&] { closed.Notify(); });
  s.reset();
  ASSERT_TRUE(closed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(manager.size(), 0u);
  EXPECT_EQ(device.memory_used(), 0u);
}

TEST(SessionManagerTest, AttachOnceAndDetachCloses) {
  CpuDevice device({});
  SessionManager manager(absl::ZeroDuration(), 8);
  auto s = manager.Create("a").value();
  Add(*s, device, 100).value();
  ASSERT_TRUE(manager.Attach(s->id()).ok());
  EXPECT_EQ(manager.Attach(s->id()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(manager.Attach("unknown").status().code(),
            absl::StatusCode::kNotFound);
  manager.Detach(s->id());
  EXPECT_TRUE(s->closed());
  EXPECT_EQ(device.memory_used(), 0u);
  EXPECT_EQ(manager.Find(s->id()).status().code(), absl::StatusCode::kNotFound);
  manager.Detach(s->id());  // a second end is harmless
}

TEST(SessionManagerTest, ListenerSetAfterCloseIsCalledAtOnce) {
  SessionManager manager(absl::ZeroDuration(), 8);
  auto s = manager.Create("a").value();
  ASSERT_TRUE(manager.Close(s->id()).ok());
  int calls = 0;
  s->SetCloseListener([&] { ++calls; });
  EXPECT_EQ(calls, 1);
  s->Close();
  EXPECT_EQ(calls, 1);
}

TEST(SessionManagerTest, DestructorClosesEverySession) {
  CpuDevice device({});
  std::shared_ptr<Session> s;
  {
    SessionManager manager(absl::Seconds(30), 8);
    s = manager.Create("a").value();
    Add(*s, device, 100).value();
  }
  EXPECT_TRUE(s->closed());
  EXPECT_EQ(device.memory_used(), 0u);
}

}  // namespace
}  // namespace tessera::server
