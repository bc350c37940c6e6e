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
      next_handle_(next_handle),
      last_used_(absl::Now()) {}

Session::~Session() { Close(); }

absl::Status Session::NotFound(absl::string_view what, uint64_t handle) const {
  return absl::NotFoundError(absl::StrCat("[Session ", id_, "] no ", what,
                                          " with handle ", handle,
                                          " in this session"));
}

absl::StatusOr<uint64_t> Session::AddBuffer(std::unique_ptr<Buffer> buffer) {
  absl::MutexLock lock(&mu_);
  if (closed_) {
    return absl::NotFoundError(
        absl::StrCat("[Session ", id_, "] the session is closed"));
  }
  const uint64_t handle = next_handle_.fetch_add(1);
  buffers_.emplace(handle, std::shared_ptr<Buffer>(std::move(buffer)));
  return handle;
}

absl::StatusOr<std::shared_ptr<Buffer>> Session::FindBuffer(
    uint64_t handle) const {
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return NotFound("buffer", handle);
  return it->second;
}

absl::Status Session::FreeBuffer(uint64_t handle) {
  std::shared_ptr<Buffer> freed;  // released outside the lock
  absl::MutexLock lock(&mu_);
  auto it = buffers_.find(handle);
  if (it == buffers_.end()) return NotFound("buffer", handle);
  freed = std::move(it->second);
  buffers_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Session::AddGraph(
    std::shared_ptr<RegisteredGraph> graph) {
  absl::MutexLock lock(&mu_);
  if (closed_) {
    return absl::NotFoundError(
        absl::StrCat("[Session ", id_, "] the session is closed"));
  }
  const uint64_t handle = next_handle_.fetch_add(1);
  graphs_.emplace(handle, std::move(graph));
  return handle;
}

absl::StatusOr<std::shared_ptr<RegisteredGraph>> Session::FindGraph(
    uint64_t handle) const {
  absl::MutexLock lock(&mu_);
  auto it = graphs_.find(handle);
  if (it == graphs_.end()) return NotFound("graph", handle);
  return it->second;
}

absl::Status Session::ReleaseGraph(uint64_t handle) {
  std::shared_ptr<RegisteredGraph> released;  // destroyed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = graphs_.find(handle);
  if (it == graphs_.end()) return NotFound("graph", handle);
  released = std::move(it->second);
  graphs_.erase(it);
  return absl::OkStatus();
}

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
  absl::MutexLock lock(&mu_);
  size_t bytes = 0;
  for (const auto& [handle, buffer] : buffers_) bytes += buffer->size();
  for (const auto& [handle, graph] : graphs_) bytes += graph->memory_bytes();
  return bytes;
}

size_t Session::num_buffers() const {
  absl::MutexLock lock(&mu_);
  return buffers_.size();
}

size_t Session::num_graphs() const {
  absl::MutexLock lock(&mu_);
  return graphs_.size();
}

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

// 1. Mark closed and take the buffers and graphs out under mu_.
// 2. Destroy them outside it (a graph's destructor waits for its work).
// 3. Destroy the one-shot streams once no compute uses them.
// 4. Tell the listener.
void Session::Close() {
  absl::flat_hash_map<uint64_t, std::shared_ptr<Buffer>> buffers;
  absl::flat_hash_map<uint64_t, std::shared_ptr<RegisteredGraph>> graphs;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    buffers.swap(buffers_);
    graphs.swap(graphs_);
  }
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
