#include "proto/content_hash.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::wire {
namespace {

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 131 + i / 7);
  return v;
}

TEST(ContentHashTest, ThreadsAndPiecesGiveTheSameHash) {
  for (size_t n : {size_t{0}, size_t{1}, kHashBlockBytes - 1, kHashBlockBytes,
                   2 * kHashBlockBytes + 12345}) {
    const std::vector<uint8_t> data = Pattern(n);
    const ContentHash one = HashContent(data.data(), n, 1);
    EXPECT_EQ(HashContent(data.data(), n, 3), one) << n;
    ContentHasher hasher;
    for (size_t at = 0; at < n;) {
      const size_t piece = std::min<size_t>(n - at, 1000003);
      hasher.Update(data.data() + at, piece);
      at += piece;
    }
    EXPECT_EQ(hasher.Finish(), one) << n;
  }
}

TEST(ContentHashTest, OneBitOrOneByteMoreChangesIt) {
  std::vector<uint8_t> data = Pattern(kHashBlockBytes + 10);
  const ContentHash before = HashContent(data.data(), data.size(), 2);
  data[kHashBlockBytes + 3] ^= 1;
  EXPECT_FALSE(HashContent(data.data(), data.size(), 2) == before);
  data[kHashBlockBytes + 3] ^= 1;
  EXPECT_FALSE(HashContent(data.data(), data.size() - 1, 2) == before);
  // A single-block input is not its block's plain XXH3-128: the size is in.
  const XXH128_hash_t plain = XXH3_128bits(data.data(), 100);
  const ContentHash small = HashContent(data.data(), 100, 1);
  EXPECT_FALSE(small.high == plain.high64 && small.low == plain.low64);
  EXPECT_EQ(small.Hex().size(), 32u);
}

}  // namespace
}  // namespace tessera::wire
