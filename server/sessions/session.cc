#include "server/sessions/session.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/sessions/registered_graph.h"

namespace tessera::server {

Session::Session(std::string id, std::string client_name,
                 std::atomic<uint64_t>& next_handle)
    : id_(std::move(id)),
      client_name_(std::move(client_name)),
      buffers_(id_, "buffer", next_handle),
      graphs_(id_, "graph", next_handle),
      last_used_(absl::Now()) {}

Session::~Session() { Close(); }

absl::StatusOr<Stream*> Session::ComputeStream(Device& device) {
  auto it = streams_.find(&device);
  if (it != streams_.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<Stream>> stream = device.CreateStream();
  if (!stream.ok()) return stream.status();
  Stream* raw = stream->get();
  streams_.emplace(&device, *std::move(stream));
  return raw;
}

size_t Session::memory_held() const {
  return buffers_.Sum([](const Buffer& buffer) { return buffer.size(); }) +
         graphs_.Sum(
             [](const RegisteredGraph& graph) { return graph.memory_bytes(); }) +
         pending_bytes_;
}

absl::Status Session::HoldPending(uint64_t quota, uint64_t bytes,
                                  absl::string_view call) {
  if (absl::Status s = CheckQuota(quota, bytes, call); !s.ok()) return s;
  pending_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status Session::CheckQuota(uint64_t quota, uint64_t bytes,
                                 absl::string_view call) const {
  if (quota == 0) return absl::OkStatus();
  const uint64_t held = memory_held();
  if (bytes <= quota && held <= quota - bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "[", call, "] the session holds ", held, " bytes and asks for ", bytes,
      " more; its quota (--session_memory_quota) is ", quota, " bytes"));
}

size_t Session::num_buffers() const { return buffers_.size(); }

size_t Session::num_graphs() const { return graphs_.size(); }

void Session::Touch() {
  absl::MutexLock lock(&mu_);
  last_used_ = absl::Now();
}

absl::Time Session::last_used() const {
  absl::MutexLock lock(&mu_);
  return last_used_;
}

bool Session::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

// 1. Mark closed, and close the tables taking the buffers and graphs out.
// 2. Destroy them outside any lock (a graph's destructor waits for its
//    work).
// 3. Destroy the one-shot streams once no compute uses them.
// 4. Tell the listener.
void Session::Close() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  absl::flat_hash_map<uint64_t, std::shared_ptr<Buffer>> buffers =
      buffers_.Close();
  absl::flat_hash_map<uint64_t, std::shared_ptr<RegisteredGraph>> graphs =
      graphs_.Close();
  graphs.clear();
  buffers.clear();
  {
    absl::MutexLock lock(&compute_mu_);
    streams_.clear();
  }
  absl::MutexLock lock(&listener_mu_);
  if (!listener_called_) {
    listener_called_ = true;
    if (close_listener_) close_listener_();
    close_listener_ = nullptr;
  }
}

void Session::SetCloseListener(std::function<void()> listener) {
  absl::MutexLock lock(&listener_mu_);
  close_listener_ = std::move(listener);
  if (listener_called_ && close_listener_) {
    std::function<void()> call = std::move(close_listener_);
    close_listener_ = nullptr;
    call();
  }
}

}  // namespace tessera::server
