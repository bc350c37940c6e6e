#include "server/rpc/drain_notice.h"

#include <utility>

namespace tessera::server {

uint64_t DrainNotice::Add(std::function<void()> listener) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  if (announced_) {
    listener();
  } else {
    listeners_.emplace(id, std::move(listener));
  }
  return id;
}

void DrainNotice::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  listeners_.erase(id);
}

void DrainNotice::Announce() {
  absl::MutexLock lock(&mu_);
  if (announced_) return;
  announced_ = true;
  for (auto& [id, listener] : listeners_) listener();
  listeners_.clear();
}

}  // namespace tessera::server
