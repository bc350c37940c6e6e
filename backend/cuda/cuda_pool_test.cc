#include "backend/cuda/cuda_pool.h"

#include <cstdint>
#include <cstdlib>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// Chunks from host memory, refusing once `capacity` bytes are out.
class FakeSource final : public ChunkSource {
 public:
  explicit FakeSource(size_t capacity) : capacity_(capacity) {}
  ~FakeSource() override { EXPECT_TRUE(live_.empty()); }

  absl::StatusOr<void*> AllocateChunk(size_t size) override {
    ++allocations;
    if (size > capacity_ - used_) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("fake: %u bytes wanted, %u left", size,
                          capacity_ - used_));
    }
    void* p = std::aligned_alloc(256, size);
    used_ += size;
    live_.insert({p, size});
    return p;
  }
  void FreeChunk(void* chunk) override {
    for (auto it = live_.begin(); it != live_.end(); ++it) {
      if (it->first == chunk) {
        used_ -= it->second;
        live_.erase(it);
        std::free(chunk);
        return;
      }
    }
    ADD_FAILURE() << "freed an unknown chunk";
  }

  size_t used() const { return used_; }
  int allocations = 0;

 private:
  const size_t capacity_;
  size_t used_ = 0;
  std::set<std::pair<void*, size_t>> live_;
};

constexpr size_t kMiB = size_t{1} << 20;

TEST(CudaPoolTest, SubAllocatesFromOneChunk) {
  FakeSource source(64 * kMiB);
  CudaPool pool("pool", 64 * kMiB, source, 8 * kMiB);
  std::vector<void*> ptrs;
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<void*> p = pool.Allocate(1000);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % CudaPool::kAlignment, 0u);
    ptrs.push_back(*p);
  }
  EXPECT_EQ(source.allocations, 1);
  EXPECT_EQ(pool.num_chunks(), 1u);
  EXPECT_EQ(pool.reserved(), 8 * kMiB);
  EXPECT_EQ(pool.in_use(), 10 * 1024u);
  // Ranges do not overlap: 1000 bytes round up to 1024.
  std::set<uintptr_t> starts;
  for (void* p : ptrs) starts.insert(reinterpret_cast<uintptr_t>(p));
  uintptr_t prev = 0;
  for (uintptr_t s : starts) {
    if (prev != 0) {
      EXPECT_GE(s - prev, 1024u);
    }
    prev = s;
  }
  for (void* p : ptrs) pool.Free(p);
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST(CudaPoolTest, ReusesFreedRangesWithoutNewChunks) {
  FakeSource source(64 * kMiB);
  CudaPool pool("pool", 64 * kMiB, source, 8 * kMiB);
  for (int graph = 0; graph < 100; ++graph) {
    absl::StatusOr<void*> a = pool.Allocate(3 * kMiB);
    absl::StatusOr<void*> b = pool.Allocate(4 * kMiB);
    ASSERT_TRUE(a.ok() && b.ok());
    pool.Free(*a);
    pool.Free(*b);
  }
  EXPECT_EQ(source.allocations, 1);
}

TEST(CudaPoolTest, MergesNeighboursSoALargeRangeFitsAgain) {
  FakeSource source(8 * kMiB);
  CudaPool pool("pool", 8 * kMiB, source, 8 * kMiB);
  absl::StatusOr<void*> a = pool.Allocate(2 * kMiB);
  absl::StatusOr<void*> b = pool.Allocate(2 * kMiB);
  absl::StatusOr<void*> c = pool.Allocate(2 * kMiB);
  absl::StatusOr<void*> d = pool.Allocate(2 * kMiB);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  pool.Free(*b);
  pool.Free(*c);
  // b and c merged: 4 MiB fit where they were, with no new chunk.
  absl::StatusOr<void*> e = pool.Allocate(4 * kMiB);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*e, *b);
  EXPECT_EQ(source.allocations, 1);
  pool.Free(*a);
  pool.Free(*d);
  pool.Free(*e);
}

TEST(CudaPoolTest, BestFitPicksTheSmallestHole) {
  FakeSource source(8 * kMiB);
  CudaPool pool("pool", 8 * kMiB, source, 8 * kMiB);
  std::vector<void*> p;
  for (size_t size : {3 * kMiB, kMiB, 1 * kMiB, kMiB, 2 * kMiB}) {
    absl::StatusOr<void*> r = pool.Allocate(size);
    ASSERT_TRUE(r.ok());
    p.push_back(*r);
  }
  pool.Free(p[0]);  // a 3 MiB hole
  pool.Free(p[2]);  // a 1 MiB hole
  absl::StatusOr<void*> r = pool.Allocate(kMiB);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, p[2]);
  pool.Free(*r);
  pool.Free(p[1]);
  pool.Free(p[3]);
  pool.Free(p[4]);
}

TEST(CudaPoolTest, LargeRequestGetsItsOwnChunkAndGivesItBack) {
  FakeSource source(64 * kMiB);
  CudaPool pool("pool", 64 * kMiB, source, 4 * kMiB);
  absl::StatusOr<void*> big = pool.Allocate(20 * kMiB + 1);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(pool.reserved(), 22 * kMiB);  // rounded to 2 MiB
  pool.Free(*big);
  EXPECT_EQ(pool.reserved(), 0u);  // larger than chunk_size: not cached
}

TEST(CudaPoolTest, RequestAboveTheLimitIsResourceExhausted) {
  FakeSource source(16 * kMiB);
  CudaPool pool("cuda0 pool", 16 * kMiB, source, 4 * kMiB);
  absl::StatusOr<void*> p = pool.Allocate(17 * kMiB);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("cuda0 pool"), std::string::npos);
  EXPECT_EQ(source.allocations, 0);
  // Still usable.
  absl::StatusOr<void*> q = pool.Allocate(kMiB);
  ASSERT_TRUE(q.ok()) << q.status();
  pool.Free(*q);
}

TEST(CudaPoolTest, SourceOutOfMemoryIsResourceExhaustedAndPoolKeepsWorking) {
  FakeSource source(12 * kMiB);
  CudaPool pool("pool", 64 * kMiB, source, 4 * kMiB);
  absl::StatusOr<void*> a = pool.Allocate(8 * kMiB);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<void*> b = pool.Allocate(8 * kMiB);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("fake"), std::string::npos);
  absl::StatusOr<void*> c = pool.Allocate(2 * kMiB);
  ASSERT_TRUE(c.ok()) << c.status();
  pool.Free(*a);
  pool.Free(*c);
}

TEST(CudaPoolTest, OutOfMemoryReleasesTheCachedChunkAndRetries) {
  FakeSource source(10 * kMiB);
  CudaPool pool("pool", 64 * kMiB, source, 4 * kMiB);
  absl::StatusOr<void*> a = pool.Allocate(kMiB);
  ASSERT_TRUE(a.ok());
  pool.Free(*a);  // the 4 MiB chunk stays cached
  EXPECT_EQ(source.used(), 4 * kMiB);
  absl::StatusOr<void*> b = pool.Allocate(8 * kMiB);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(source.used(), 8 * kMiB);
  pool.Free(*b);
}

TEST(CudaPoolTest, ZeroBytesGivesADistinctRange) {
  FakeSource source(8 * kMiB);
  CudaPool pool("pool", 8 * kMiB, source, 4 * kMiB);
  absl::StatusOr<void*> a = pool.Allocate(0);
  absl::StatusOr<void*> b = pool.Allocate(0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  pool.Free(*a);
  pool.Free(*b);
}

}  // namespace
}  // namespace tessera
