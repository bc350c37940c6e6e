#include "server/sessions/session.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/sessions/registered_graph.h"

namespace tessera::server {

Session::Session(std::string id, std::string client_name,
                 std::atomic<uint64_t>& next_handle,
                 std::shared_ptr<MemoryAccount> memory)
    : id_(std::move(id)),
      client_name_(std::move(client_name)),
      memory_(std::move(memory)),
      buffers_(id_, "buffer", next_handle),
      graphs_(id_, "graph", next_handle),
      comm_groups_(id_, "collective group", next_handle),
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

namespace {

// The charge rides in the shared_ptr's deleter: it is given back when the
// last holder (the table, a request, a registered graph) lets go.
template <typename T>
std::shared_ptr<T> Charged(std::unique_ptr<T> object, MemoryCharge charge) {
  auto held = std::make_shared<MemoryCharge>(std::move(charge));
  return std::shared_ptr<T>(object.release(), [held](T* t) {
    delete t;
    held->Release();
  });
}

}  // namespace

absl::StatusOr<uint64_t> Session::AddBuffer(std::unique_ptr<Buffer> buffer,
                                            MemoryCharge charge) {
  return buffers_.Add(Charged(std::move(buffer), std::move(charge)));
}

absl::StatusOr<uint64_t> Session::AddGraph(
    std::unique_ptr<RegisteredGraph> graph, MemoryCharge charge) {
  return graphs_.Add(Charged(std::move(graph), std::move(charge)));
}

absl::StatusOr<uint64_t> Session::AddCommGroup(
    std::unique_ptr<Communicator> group, size_t max) {
  absl::MutexLock lock(&comm_groups_add_mu_);
  if (comm_groups_.size() >= max) {
    return absl::ResourceExhaustedError(
        absl::StrCat("[Session ", id_, "] holds ", max,
                     " collective groups, the most it may"));
  }
  return comm_groups_.Add(std::move(group));
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

// 1. Mark closed, and close the tables taking the buffers, graphs and
//    groups out.
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
  comm_groups_.Close().clear();
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
