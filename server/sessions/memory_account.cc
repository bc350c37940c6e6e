#include "server/sessions/memory_account.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::server {

MemoryCharge::MemoryCharge(MemoryCharge&& other) noexcept
    : account_(std::move(other.account_)),
      bytes_(std::exchange(other.bytes_, 0)) {}

MemoryCharge& MemoryCharge::operator=(MemoryCharge&& other) noexcept {
  if (this != &other) {
    Release();
    account_ = std::move(other.account_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryCharge::Release() {
  if (account_ != nullptr) {
    for (MemoryAccount* a = account_.get(); a != nullptr; a = a->parent_.get()) {
      a->Sub(bytes_);
    }
  }
  account_ = nullptr;
  bytes_ = 0;
}

std::shared_ptr<MemoryAccount> MemoryAccount::Create(
    std::string name, uint64_t limit, std::shared_ptr<MemoryAccount> parent) {
  return std::shared_ptr<MemoryAccount>(
      new MemoryAccount(std::move(name), limit, std::move(parent)));
}

MemoryAccount::MemoryAccount(std::string name, uint64_t limit,
                             std::shared_ptr<MemoryAccount> parent)
    : name_(std::move(name)), parent_(std::move(parent)), limit_(limit) {}

bool MemoryAccount::TryAdd(uint64_t bytes) {
  const uint64_t limit = limit_.load();
  uint64_t used = used_.load();
  do {
    if (limit != 0 && (bytes > limit || used > limit - bytes)) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes));
  return true;
}

void MemoryAccount::Sub(uint64_t bytes) { used_.fetch_sub(bytes); }

// From this account up to the root; on a refusal, the accounts charged so
// far are given their bytes back.
absl::StatusOr<MemoryCharge> MemoryAccount::Reserve(uint64_t bytes,
                                                    absl::string_view call) {
  for (MemoryAccount* a = this; a != nullptr; a = a->parent_.get()) {
    if (a->TryAdd(bytes)) continue;
    for (MemoryAccount* b = this; b != a; b = b->parent_.get()) b->Sub(bytes);
    return absl::ResourceExhaustedError(
        absl::StrCat("[", call, "] ", a->name_, " holds ", a->used(),
                     " bytes and asks for ", bytes, " more; its limit is ",
                     a->limit(), " bytes"));
  }
  return MemoryCharge(shared_from_this(), bytes);
}

}  // namespace tessera::server
