#include "server/sessions/session_manager.h"

#include <algorithm>
#include <iterator>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/decoding/client_text.h"
#include "spdlog/spdlog.h"

namespace tessera::server {
namespace {

// Client names are for logs: longer ones are cut (client_text.h).
constexpr size_t kMaxClientNameBytes = 256;

std::string RandomId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&id, "%08x", random());
  return id;
}

absl::Status NoSession(absl::string_view id) {
  return absl::NotFoundError(
      absl::StrCat("[SessionManager] no open session \"", ClientText(id),
                   "\""));
}

}  // namespace

SessionManager::SessionManager(absl::Duration idle_timeout,
                               size_t max_sessions, uint64_t session_quota,
                               std::shared_ptr<MemoryAccount> budget)
    : idle_timeout_(idle_timeout),
      max_sessions_(max_sessions),
      session_quota_(session_quota),
      budget_(std::move(budget)) {
  timer_ = std::thread([this] { TimerLoop(); });
}

SessionManager::~SessionManager() {
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    sessions.swap(sessions_);
  }
  if (timer_.joinable()) timer_.join();
  for (auto& [id, session] : sessions) session->Close();
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Create(
    std::string client_name) {
  std::string id = RandomId();
  auto session = std::make_shared<Session>(
      id, ClientText(client_name, kMaxClientNameBytes), next_handle_,
      MemoryAccount::Create("the session (--session_memory_quota)",
                            session_quota_, budget_));
  absl::MutexLock lock(&mu_);
  switch (admission_) {
    case Admission::kStarting:
      return absl::UnavailableError(
          "[Hello] the daemon is still opening its devices; try again");
    case Admission::kDraining:
      return absl::UnavailableError(
          "[Hello] the daemon is draining and takes no new sessions");
    case Admission::kOpen:
      break;
  }
  if (sessions_.size() >= max_sessions_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("[Hello] ", sessions_.size(),
                     " sessions are open, the limit (--max_sessions) is ",
                     max_sessions_));
  }
  sessions_.emplace(std::move(id), session);
  return session;
}

void SessionManager::SetAdmission(Admission admission) {
  absl::MutexLock lock(&mu_);
  admission_ = admission;
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Find(
    absl::string_view id) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return NoSession(id);
    session = it->second;
  }
  session->Touch();
  return session;
}

std::shared_ptr<Session> SessionManager::Remove(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return nullptr;
  std::shared_ptr<Session> session = std::move(it->second);
  sessions_.erase(it);
  attached_.erase(id);
  return session;
}

absl::Status SessionManager::Close(absl::string_view id) {
  std::shared_ptr<Session> session = Remove(id);
  if (session == nullptr) return NoSession(id);
  spdlog::info("session {} closed by the client", session->id());
  session->Close();
  RequestTrim();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Attach(
    absl::string_view id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return NoSession(id);
  if (!attached_.insert(std::string(id)).second) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[SessionManager] session \"", ClientText(id),
        "\" already has an Attach stream"));
  }
  it->second->Touch();
  return it->second;
}

void SessionManager::Detach(absl::string_view id) {
  std::shared_ptr<Session> session = Remove(id);
  if (session == nullptr) return;
  spdlog::info("session {} closed: its Attach stream ended", session->id());
  session->Close();
  RequestTrim();
}

size_t SessionManager::ExpireIdle(absl::Time now) {
  if (idle_timeout_ <= absl::ZeroDuration()) return 0;
  std::vector<std::shared_ptr<Session>> expired;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto next = std::next(it);
      if (!attached_.contains(it->first) &&
          now - it->second->last_used() > idle_timeout_) {
        expired.push_back(std::move(it->second));
        sessions_.erase(it);
      }
      it = next;
    }
  }
  for (const std::shared_ptr<Session>& session : expired) {
    spdlog::info("session {} closed: idle for more than {}", session->id(),
                 absl::FormatDuration(idle_timeout_));
    session->Close();
  }
  if (!expired.empty()) RequestTrim();
  return expired.size();
}

size_t SessionManager::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

void SessionManager::RequestTrim() {
  absl::MutexLock lock(&mu_);
  trim_requested_ = true;
  timer_wake_ = true;
}

// 1. Wait for a period (four per idle timeout, at most a second, at least
//    5 ms) or for sessions to close.
// 2. Close the idle sessions.
// 3. Trim the heap if sessions closed since the last trim; when the
//    throttle refuses, the request waits for a later period.
void SessionManager::TimerLoop() {
  const absl::Duration period =
      idle_timeout_ > absl::ZeroDuration()
          ? std::clamp(idle_timeout_ / 4, absl::Milliseconds(5),
                       absl::Seconds(1))
          : absl::Seconds(1);
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.AwaitWithTimeout(absl::Condition(this, &SessionManager::TimerWake),
                         period);
    if (stopping_) break;
    timer_wake_ = false;
    mu_.Unlock();
    ExpireIdle(absl::Now());
    mu_.Lock();
    if (std::exchange(trim_requested_, false)) {
      mu_.Unlock();
      const bool trimmed = trimmer_.TrimIfDue(absl::Now());
      mu_.Lock();
      if (!trimmed) trim_requested_ = true;
    }
  }
}

}  // namespace tessera::server
