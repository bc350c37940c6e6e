#ifndef TESSERA_SERVER_SESSIONS_SESSION_H_
#define TESSERA_SERVER_SESSIONS_SESSION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "backend/buffer.h"
#include "backend/comm/communicator.h"
#include "backend/device.h"
#include "backend/stream.h"
#include "server/sessions/handle_table.h"
#include "server/sessions/memory_account.h"

namespace tessera::server {

class RegisteredGraph;

// What one client owns on the daemon: buffers, registered graphs and
// collective groups by handle, and the streams its one-shot computes (and
// collectives) run on. Handles come from a
// counter shared by every session, so a handle is never valid in two
// sessions; looking up a handle this session does not hold (another
// session's, a freed one, 0) is NOT_FOUND.
//
// Objects are shared_ptrs: Close and Free drop the session's references at
// once and the memory returns when the last in-flight request using it ends.
//
// Memory: every byte the session causes is charged to its MemoryAccount
// (its quota, under the daemon-wide budget) for as long as it exists: a
// buffer until the buffer object is destroyed (a registered graph that
// uses a freed buffer keeps it charged), a graph's compute memory while
// the graph lives, and what requests hold while they run (Reserve).
// Thread-safe.
class Session {
 public:
  // `memory` is the session's own account (see above).
  Session(std::string id, std::string client_name,
          std::atomic<uint64_t>& next_handle,
          std::shared_ptr<MemoryAccount> memory);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::string& id() const { return id_; }
  const std::string& client_name() const { return client_name_; }

  // Charges `bytes` to the session (and the daemon) until the charge is
  // destroyed; `call` names the RPC in errors.
  // Errors: RESOURCE_EXHAUSTED, with the numbers, over the session's quota
  // or the daemon's budget.
  absl::StatusOr<MemoryCharge> Reserve(uint64_t bytes, absl::string_view call) {
    return memory_->Reserve(bytes, call);
  }

  // Takes ownership of `buffer`, with `charge` (its bytes, from Reserve)
  // held until the buffer is destroyed, and returns its handle (never 0).
  // Errors: NOT_FOUND once the session is closed.
  absl::StatusOr<uint64_t> AddBuffer(std::unique_ptr<Buffer> buffer,
                                     MemoryCharge charge);
  // Errors: NOT_FOUND for a handle this session does not hold.
  absl::StatusOr<std::shared_ptr<Buffer>> FindBuffer(uint64_t handle) const {
    return buffers_.Find(handle);
  }
  absl::Status FreeBuffer(uint64_t handle) { return buffers_.Remove(handle); }

  // Errors: as the buffer calls. A released graph is destroyed (waiting for
  // its work) once no request uses it, outside the session's locks; its
  // `charge` (its compute memory) is held until then.
  absl::StatusOr<uint64_t> AddGraph(std::unique_ptr<RegisteredGraph> graph,
                                    MemoryCharge charge);
  absl::StatusOr<std::shared_ptr<RegisteredGraph>> FindGraph(
      uint64_t handle) const {
    return graphs_.Find(handle);
  }
  absl::Status ReleaseGraph(uint64_t handle) { return graphs_.Remove(handle); }

  // The collective groups spanning daemons this session joined (one rank
  // each). Errors: as the buffer calls; RESOURCE_EXHAUSTED when the session
  // holds `max` groups already.
  absl::StatusOr<uint64_t> AddCommGroup(std::unique_ptr<Communicator> group,
                                        size_t max);
  absl::StatusOr<std::shared_ptr<Communicator>> FindCommGroup(
      uint64_t handle) const {
    return comm_groups_.Find(handle);
  }
  absl::Status LeaveCommGroup(uint64_t handle) {
    return comm_groups_.Remove(handle);
  }
  size_t num_comm_groups() const { return comm_groups_.size(); }

  // The stream of `device` that one-shot computes of this session run on,
  // created on first use. Callers hold compute_mutex() while they queue work
  // on it (a stream takes work from one thread at a time).
  absl::Mutex& compute_mutex() ABSL_LOCK_RETURNED(compute_mu_) {
    return compute_mu_;
  }
  absl::StatusOr<Stream*> ComputeStream(Device& device)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(compute_mu_);
  // Drops the one-shot streams (after a failure left them a sticky error).
  void ResetComputeStreams() ABSL_EXCLUSIVE_LOCKS_REQUIRED(compute_mu_) {
    streams_.clear();
  }

  // Bytes charged to the session now (see above).
  uint64_t memory_held() const { return memory_->used(); }
  size_t num_buffers() const;
  size_t num_graphs() const;

  // Records activity now (idle expiry counts from the last one).
  void Touch();
  absl::Time last_used() const;

  // Drops every buffer, graph, group and stream; later Add* calls and lookups
  // are NOT_FOUND. Calls the close listener, if any, once. Idempotent.
  void Close();
  bool closed() const;

  // `listener` is called once when the session closes (at once if it
  // already has). Setting another (or an empty function) replaces it and
  // waits for a call in progress to return.
  void SetCloseListener(std::function<void()> listener);

 private:
  // Constant after construction.
  const std::string id_;
  const std::string client_name_;
  const std::shared_ptr<MemoryAccount> memory_;

  // Synchronized by themselves; closed by Close().
  HandleTable<Buffer> buffers_;
  HandleTable<RegisteredGraph> graphs_;
  HandleTable<Communicator> comm_groups_;
  // Serializes AddCommGroup's count and add.
  absl::Mutex comm_groups_add_mu_;

  // State below is protected by mu_.
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_used_ ABSL_GUARDED_BY(mu_);

  // Streams by device, protected by compute_mu_.
  absl::Mutex compute_mu_;
  absl::flat_hash_map<Device*, std::unique_ptr<Stream>> streams_
      ABSL_GUARDED_BY(compute_mu_);

  // Protected by listener_mu_ (held while the listener runs).
  absl::Mutex listener_mu_;
  std::function<void()> close_listener_ ABSL_GUARDED_BY(listener_mu_);
  bool listener_called_ ABSL_GUARDED_BY(listener_mu_) = false;
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_SESSION_H_
