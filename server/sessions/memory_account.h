#ifndef TESSERA_SERVER_SESSIONS_MEMORY_ACCOUNT_H_
#define TESSERA_SERVER_SESSIONS_MEMORY_ACCOUNT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::server {

class MemoryAccount;

// Bytes held against an account (and its parents) until the charge is
// destroyed or Released. Movable, not copyable; it keeps its account alive.
class MemoryCharge {
 public:
  MemoryCharge() = default;
  ~MemoryCharge() { Release(); }
  MemoryCharge(MemoryCharge&& other) noexcept;
  MemoryCharge& operator=(MemoryCharge&& other) noexcept;
  MemoryCharge(const MemoryCharge&) = delete;
  MemoryCharge& operator=(const MemoryCharge&) = delete;

  uint64_t bytes() const { return bytes_; }
  // Gives the bytes back now.
  void Release();

 private:
  friend class MemoryAccount;
  MemoryCharge(std::shared_ptr<MemoryAccount> account, uint64_t bytes)
      : account_(std::move(account)), bytes_(bytes) {}

  std::shared_ptr<MemoryAccount> account_;
  uint64_t bytes_ = 0;
};

// Bytes that something holds, counted against a limit and against the
// parent's: a session's quota under the daemon-wide budget. Every byte a
// session causes (buffers for as long as they live, compute memory,
// upload staging) is charged here. Thread-safe.
class MemoryAccount : public std::enable_shared_from_this<MemoryAccount> {
 public:
  // `name` appears in errors ("the session", "the daemon"); `limit` 0: no
  // limit of its own; `parent` may be null.
  static std::shared_ptr<MemoryAccount> Create(
      std::string name, uint64_t limit,
      std::shared_ptr<MemoryAccount> parent = nullptr);
  MemoryAccount(const MemoryAccount&) = delete;
  MemoryAccount& operator=(const MemoryAccount&) = delete;

  // Charges `bytes` here and in every parent, or nothing.
  // Errors: RESOURCE_EXHAUSTED "[CALL] NAME holds H bytes and asks for B
  // more; its limit (WHAT) is L bytes" for the first account it would
  // overdraw.
  absl::StatusOr<MemoryCharge> Reserve(uint64_t bytes, absl::string_view call);

  uint64_t used() const { return used_.load(); }
  uint64_t limit() const { return limit_.load(); }
  // A new limit (0: none) for later reservations; what is held stays.
  void set_limit(uint64_t limit) { limit_.store(limit); }

 private:
  MemoryAccount(std::string name, uint64_t limit,
                std::shared_ptr<MemoryAccount> parent);
  // Adds `bytes` here unless that passes the limit.
  bool TryAdd(uint64_t bytes);
  void Sub(uint64_t bytes);
  friend class MemoryCharge;

  // Constant after construction.
  const std::string name_;
  const std::shared_ptr<MemoryAccount> parent_;

  std::atomic<uint64_t> limit_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_MEMORY_ACCOUNT_H_
