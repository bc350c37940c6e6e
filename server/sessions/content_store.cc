#include "server/sessions/content_store.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace tessera::server {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'R', 'C', 'A', 'C', 'H', '1'};

struct FileHeader {
  char magic[8];
  uint64_t size;
  uint64_t high;
  uint64_t low;
};

}  // namespace

ContentStore::ContentStore(size_t memory_budget, std::string dir,
                           std::shared_ptr<MemoryAccount> account)
    : memory_budget_(memory_budget),
      dir_(std::move(dir)),
      account_(std::move(account)) {
  if (!dir_.empty()) {
    std::error_code error;
    std::filesystem::create_directories(dir_, error);
    if (error) {
      spdlog::warn("cache directory {}: {}", dir_, error.message());
    }
  }
}

std::string ContentStore::PathOf(const wire::ContentHash& hash) const {
  return absl::StrCat(dir_, "/", hash.Hex(), ".tensor");
}

ContentStore::Bytes ContentStore::Find(const wire::ContentHash& hash,
                                       size_t size) {
  const Key key{hash.high, hash.low};
  if (Bytes bytes = FindInMemory(key, size); bytes != nullptr) return bytes;
  if (dir_.empty()) return nullptr;
  Bytes bytes = Load(hash, size);
  if (bytes != nullptr) KeepInMemory(key, bytes);
  return bytes;
}

void ContentStore::Put(const wire::ContentHash& hash, Bytes bytes) {
  if (!dir_.empty()) Save(hash, *bytes);
  KeepInMemory({hash.high, hash.low}, std::move(bytes));
}

ContentStore::Bytes ContentStore::FindInMemory(const Key& key, size_t size) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.bytes->size() != size) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.bytes;
}

void ContentStore::EvictOldest() {
  auto oldest = entries_.find(lru_.back());
  memory_used_ -= oldest->second.bytes->size();
  entries_.erase(oldest);
  lru_.pop_back();
}

// 1. Make room under memory_budget_, oldest first.
// 2. Charge the account, evicting more while it refuses.
void ContentStore::KeepInMemory(const Key& key, Bytes bytes) {
  if (bytes->size() > memory_budget_) return;
  absl::MutexLock lock(&mu_);
  if (entries_.contains(key)) return;
  while (memory_used_ + bytes->size() > memory_budget_) EvictOldest();
  MemoryCharge charge;
  if (account_ != nullptr) {
    absl::StatusOr<MemoryCharge> reserved =
        account_->Reserve(bytes->size(), "ContentStore");
    while (!reserved.ok() && !lru_.empty()) {
      EvictOldest();
      reserved = account_->Reserve(bytes->size(), "ContentStore");
    }
    if (!reserved.ok()) return;
    charge = *std::move(reserved);
  }
  memory_used_ += bytes->size();
  lru_.push_front(key);
  entries_.emplace(key, Entry{std::move(bytes), lru_.begin(), std::move(charge)});
}

ContentStore::Bytes ContentStore::Load(const wire::ContentHash& hash,
                                       size_t size) {
  const std::string path = PathOf(hash);
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return nullptr;
  auto reject = [&](const char* why) -> Bytes {
    spdlog::warn("cache file {}: {}; ignored and removed", path, why);
    std::error_code error;
    std::filesystem::remove(path, error);
    return nullptr;
  };
  FileHeader header;
  if (!in.read(reinterpret_cast<char*>(&header), sizeof(header))) {
    return reject("shorter than its header");
  }
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0 ||
      header.high != hash.high || header.low != hash.low) {
    return reject("not a cache file for this hash");
  }
  if (header.size != size) return nullptr;  // same hash, another size: none
  auto bytes = std::make_shared<std::string>(size, '\0');
  if (!in.read(bytes->data(), static_cast<std::streamsize>(size)) ||
      in.peek() != std::char_traits<char>::eof()) {
    return reject("its length does not match its header");
  }
  if (!(wire::HashContent(bytes->data(), size, 2) == hash)) {
    return reject("its bytes do not match its hash");
  }
  return bytes;
}

void ContentStore::Save(const wire::ContentHash& hash,
                        const std::string& bytes) {
  const std::string path = PathOf(hash);
  const std::string tmp = absl::StrCat(path, ".tmp");
  FileHeader header;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.size = bytes.size();
  header.high = hash.high;
  header.low = hash.low;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.good()) {
      spdlog::warn("cache file {}: cannot write", tmp);
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    spdlog::warn("cache file {}: cannot rename into place", path);
    std::remove(tmp.c_str());
  }
}

}  // namespace tessera::server
