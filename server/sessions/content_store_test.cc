#include "server/sessions/content_store.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tessera::server {
namespace {

ContentStore::Bytes Content(size_t n, char seed) {
  auto s = std::make_shared<std::string>(n, '\0');
  for (size_t i = 0; i < n; ++i) (*s)[i] = static_cast<char>(seed + i * 13);
  return s;
}

wire::ContentHash HashOf(const ContentStore::Bytes& b) {
  return wire::HashContent(b->data(), b->size(), 1);
}

std::string NewDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(ContentStoreTest, KeepsInMemoryUpToTheBudgetOldestFirstOut) {
  ContentStore store(3 << 20, "");
  auto a = Content(1 << 20, 1), b = Content(1 << 20, 2),
       c = Content(1 << 20, 3), d = Content(1 << 20, 4);
  store.Put(HashOf(a), a);
  store.Put(HashOf(b), b);
  store.Put(HashOf(c), c);
  ASSERT_NE(store.Find(HashOf(a), a->size()), nullptr);  // a is now recent
  store.Put(HashOf(d), d);                                 // b goes
  EXPECT_EQ(store.Find(HashOf(b), b->size()), nullptr);
  EXPECT_EQ(*store.Find(HashOf(a), a->size()), *a);
  EXPECT_EQ(*store.Find(HashOf(d), d->size()), *d);
  EXPECT_EQ(store.Find(HashOf(d), d->size() - 1), nullptr);  // size differs
}

// The copies in memory count against the daemon's budget: when sessions
// hold most of it, older content goes, and content that cannot fit is not
// kept.
TEST(ContentStoreTest, MemoryCopiesAreChargedToTheDaemonBudget) {
  auto budget = MemoryAccount::Create("the daemon", 3 << 20);
  ContentStore store(8 << 20, "", budget);
  auto a = Content(1 << 20, 1), b = Content(1 << 20, 2);
  store.Put(HashOf(a), a);
  store.Put(HashOf(b), b);
  EXPECT_EQ(budget->used(), uint64_t{2} << 20);
  MemoryCharge session = budget->Reserve(1 << 20, "test").value();
  auto c = Content(1 << 20, 3);
  store.Put(HashOf(c), c);  // a goes to make room in the budget
  EXPECT_EQ(store.Find(HashOf(a), a->size()), nullptr);
  EXPECT_EQ(*store.Find(HashOf(c), c->size()), *c);
  EXPECT_EQ(budget->used(), uint64_t{3} << 20);
  auto big = Content(3 << 20, 4);
  store.Put(HashOf(big), big);  // cannot fit even with everything evicted
  EXPECT_EQ(store.Find(HashOf(big), big->size()), nullptr);
  EXPECT_LE(budget->used(), uint64_t{3} << 20);
}

TEST(ContentStoreTest, DiskCopiesOutliveTheStore) {
  const std::string dir = NewDir("store-disk");
  auto a = Content(3 << 20, 5);
  ContentStore(0, dir).Put(HashOf(a), a);
  ContentStore later(1 << 30, dir);
  ContentStore::Bytes found = later.Find(HashOf(a), a->size());
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(*found, *a);
}

TEST(ContentStoreTest, DamagedFilesAreIgnoredAndRemoved) {
  auto a = Content(2 << 20, 6);
  const wire::ContentHash hash = HashOf(a);
  const std::string file = hash.Hex() + ".tensor";
  struct Damage {
    const char* name;
    void (*apply)(const std::string& path);
  };
  const Damage damages[] = {
      {"a flipped byte",
       [](const std::string& path) {
         std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(1000);
         f.put('\x7f');
       }},
      {"truncated",
       [](const std::string& path) {
         std::filesystem::resize_file(path,
                                      std::filesystem::file_size(path) - 1);
       }},
      {"shorter than a header",
       [](const std::string& path) { std::filesystem::resize_file(path, 10); }},
      {"a byte too many",
       [](const std::string& path) {
         std::ofstream(path, std::ios::app | std::ios::binary) << 'x';
       }},
  };
  for (const Damage& damage : damages) {
    const std::string dir = NewDir("store-damaged");
    ContentStore(0, dir).Put(hash, a);
    damage.apply(dir + "/" + file);
    ContentStore later(1 << 30, dir);
    EXPECT_EQ(later.Find(hash, a->size()), nullptr) << damage.name;
    EXPECT_FALSE(std::filesystem::exists(dir + "/" + file)) << damage.name;
  }
}

}  // namespace
}  // namespace tessera::server
