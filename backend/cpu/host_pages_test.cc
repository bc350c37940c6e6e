#include "backend/cpu/host_pages.h"

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace tessera {
namespace {

uintptr_t Address(const HostPages& p) {
  return reinterpret_cast<uintptr_t>(p.get());
}

TEST(HostPagesTest, LargeBlocksStartOnAHugePage) {
  for (size_t bytes :
       {kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes}) {
    HostPages p = AllocHostPages(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(Address(p) % kHugePageBytes, 0u) << bytes;
    // Every byte is the caller's.
    std::memset(p.get(), 0xA5, bytes);
    EXPECT_EQ(static_cast<unsigned char*>(p.get())[bytes - 1], 0xA5);
  }
}

TEST(HostPagesTest, SmallBlocksAre64ByteAligned) {
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{4096}, kHugePageBytes - 1}) {
    HostPages p = AllocHostPages(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(Address(p) % 64, 0u) << bytes;
  }
}

TEST(HostPagesTest, ARefusalIsNull) {
  EXPECT_EQ(AllocHostPages(SIZE_MAX / 2), nullptr);
}

}  // namespace
}  // namespace tessera
