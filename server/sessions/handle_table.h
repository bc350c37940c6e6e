#ifndef TESSERA_SERVER_SESSIONS_HANDLE_TABLE_H_
#define TESSERA_SERVER_SESSIONS_HANDLE_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace tessera::server {

// Objects of one kind that a session holds, by handle. Handles come from a
// counter the caller shares between tables (so a handle names one object
// in one table). Errors name the owner and the kind:
//   NOT_FOUND "[Session ID] no WHAT with handle N in this session";
//   NOT_FOUND "[Session ID] the session is closed" for Add after Close.
// Thread-safe.
template <typename T>
class HandleTable {
 public:
  // `owner` (the session id) and `what` ("buffer") name it in errors;
  // `next_handle` must outlive the table.
  HandleTable(std::string owner, std::string what,
              std::atomic<uint64_t>& next_handle)
      : owner_(std::move(owner)),
        what_(std::move(what)),
        next_handle_(next_handle) {}

  // Holds `object` under a new handle and returns the handle.
  absl::StatusOr<uint64_t> Add(std::shared_ptr<T> object) {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      return absl::NotFoundError(
          absl::StrCat("[Session ", owner_, "] the session is closed"));
    }
    const uint64_t handle = next_handle_.fetch_add(1);
    objects_.emplace(handle, std::move(object));
    return handle;
  }

  absl::StatusOr<std::shared_ptr<T>> Find(uint64_t handle) const {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(handle);
    if (it == objects_.end()) return NotFound(handle);
    return it->second;
  }

  // Drops the table's reference. The object is destroyed (when this was
  // the last one) after the table's lock is released.
  absl::Status Remove(uint64_t handle) {
    std::shared_ptr<T> removed;
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(handle);
    if (it == objects_.end()) return NotFound(handle);
    removed = std::move(it->second);
    objects_.erase(it);
    return absl::OkStatus();
  }

  // Refuses later Adds and hands every object to the caller (to destroy
  // outside any lock).
  absl::flat_hash_map<uint64_t, std::shared_ptr<T>> Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    return std::exchange(objects_, {});
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return objects_.size();
  }

 private:
  absl::Status NotFound(uint64_t handle) const {
    return absl::NotFoundError(absl::StrCat("[Session ", owner_, "] no ",
                                            what_, " with handle ", handle,
                                            " in this session"));
  }

  // Constant after construction.
  const std::string owner_;
  const std::string what_;
  std::atomic<uint64_t>& next_handle_;

  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<uint64_t, std::shared_ptr<T>> objects_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_HANDLE_TABLE_H_
