#include "backend/cpu/host_memory.h"

#include <sys/resource.h>

#include <cstdint>

#include "backend/cpu/cpu_registry.h"
#include "base/sanitizers.h"
#include "backend/registry.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(HostMemoryTest, ParsesMemInfoAndCgroupFiles) {
  const char* meminfo =
      "MemTotal:       24000000 kB\n"
      "MemFree:         1000000 kB\n"
      "MemAvailable:    8000000 kB\n";
  EXPECT_EQ(MemInfoBytes(meminfo, "MemAvailable"), uint64_t{8000000} * 1024);
  EXPECT_EQ(MemInfoBytes(meminfo, "MemTotal"), uint64_t{24000000} * 1024);
  EXPECT_EQ(MemInfoBytes(meminfo, "Mem"), std::nullopt);
  EXPECT_EQ(MemInfoBytes(meminfo, "SwapFree"), std::nullopt);
  EXPECT_EQ(CgroupBytes("1073741824\n"), uint64_t{1} << 30);
  EXPECT_EQ(CgroupBytes("max\n"), std::nullopt);
  EXPECT_EQ(CgroupBytes(""), std::nullopt);
}

// Under an address-space limit, the room is what is left of it, and the
// CPU devices of cpu:N split what the process may use rather than each
// claiming all of it.
TEST(HostMemoryTest, RlimitBoundsTheRoomAndDevicesShareIt) {
#ifdef TESSERA_SANITIZED
  GTEST_SKIP() << "runs under a memory limit that sanitizers cannot meet";
#endif
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  const uint64_t before = HostMemoryRoom();
  ASSERT_GT(before, 0u);
  rlimit lowered = saved;
  lowered.rlim_cur = uint64_t{6} << 30;  // far above what the test uses
  if (saved.rlim_cur != RLIM_INFINITY && saved.rlim_cur < lowered.rlim_cur) {
    lowered.rlim_cur = saved.rlim_cur;
  }
  ASSERT_EQ(setrlimit(RLIMIT_AS, &lowered), 0);
  const uint64_t room = HostMemoryRoom();
  Registry registry;
  const absl::Status added = AddCpuDevices(2, 1, registry);
  uint64_t total = 0;
  for (Device* device : registry.devices()) total += device->Props().memory_total;
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);

  ASSERT_TRUE(added.ok()) << added;
  EXPECT_LT(room, lowered.rlim_cur);
  EXPECT_LE(room, before);
  ASSERT_EQ(registry.devices().size(), 2u);
  EXPECT_LE(total, room);
  EXPECT_GT(total, room / 2);
}

}  // namespace
}  // namespace tessera
