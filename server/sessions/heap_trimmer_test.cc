#include "server/sessions/heap_trimmer.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/time/clock.h"
#include "base/sanitizers.h"
#include "gtest/gtest.h"

namespace tessera::server {
namespace {

TEST(HeapTrimmerTest, TrimsAtMostOncePerInterval) {
  HeapTrimmer trimmer(absl::Seconds(1));
  const absl::Time t0 = absl::Now();
  EXPECT_TRUE(trimmer.TrimIfDue(t0));
  EXPECT_FALSE(trimmer.TrimIfDue(t0));
  EXPECT_FALSE(trimmer.TrimIfDue(t0 + absl::Milliseconds(999)));
  EXPECT_TRUE(trimmer.TrimIfDue(t0 + absl::Seconds(1)));
  EXPECT_FALSE(trimmer.TrimIfDue(t0 + absl::Milliseconds(1500)));
  EXPECT_TRUE(trimmer.TrimIfDue(t0 + absl::Seconds(3)));
}

TEST(HeapTrimmerTest, GivesFreedHeapMemoryBack) {
#if TESSERA_SANITIZED || !defined(__GLIBC__)
  GTEST_SKIP() << "needs glibc's allocator";
#else
  // This process's resident bytes.
  auto resident_bytes = [] {
    std::ifstream statm("/proc/self/statm");
    int64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * sysconf(_SC_PAGESIZE);
  };
  // As the daemon's TuneProcess: freed memory stays in the heap.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  // 64 MiB in 1 MiB blocks, each followed by a small block that stays, so
  // the freed blocks lie inside the heap rather than at its top.
  constexpr size_t kBlock = size_t{1} << 20;
  constexpr int kBlocks = 64;
  std::vector<char*> blocks, kept;
  for (int i = 0; i < kBlocks; ++i) {
    blocks.push_back(static_cast<char*>(std::malloc(kBlock)));
    kept.push_back(static_cast<char*>(std::malloc(64)));
    ASSERT_NE(blocks.back(), nullptr);
    ASSERT_NE(kept.back(), nullptr);
    std::memset(blocks.back(), i + 1, kBlock);
    std::memset(kept.back(), i + 1, 64);
  }
  for (char* block : blocks) std::free(block);
  const int64_t before = resident_bytes();
  HeapTrimmer trimmer(absl::Seconds(1));
  ASSERT_TRUE(trimmer.TrimIfDue(absl::Now()));
  const int64_t after = resident_bytes();
  EXPECT_GT(before - after, int64_t{kBlocks / 2} * int64_t{kBlock})
      << "resident " << before << " bytes before the trim, " << after
      << " after";
  for (int i = 0; i < kBlocks; ++i) {
    EXPECT_EQ(kept[i][0], char(i + 1));
    EXPECT_EQ(kept[i][63], char(i + 1));
    std::free(kept[i]);
  }
#endif
}

}  // namespace
}  // namespace tessera::server
