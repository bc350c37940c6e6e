#ifndef TESSERA_CLIENT_REMOTE_GRAPH_H_
#define TESSERA_CLIENT_REMOTE_GRAPH_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "client/graph_encoder.h"
#include "graph/graph.h"

namespace tessera::client {

// A graph registered on the daemon (RegisterGraph): placed and allocated
// once, then executed many times over an Execute stream. Submit queues an
// execution without waiting; Receive returns results in submission order,
// so up to n_copies executions pipeline over the daemon's devices:
//
//   auto g = RemoteGraph::Register(*client, graph, {.n_copies = 4}).value();
//   for (int k = 0; k < n; ++k) g->Submit({{x, in[k], bytes}}, {y});
//   for (int k = 0; k < n; ++k) g->Receive({{y, out[k], bytes}});
//
// One thread submits and one receives (they may differ).
//
// Executions travel together where they can. Submit sends an execution at
// once when the daemon has answered every one sent before. While it has
// not, Submit holds the new one, up to a message's worth: at most
// kMaxExecutionsPerMessage, half the daemon's max_queued_executions (so
// that the daemon keeps reading while Receive writes) and a quarter of its
// largest message. Receive sends those held, in one message, before it
// waits, once the daemon has no more executions to answer than are held
// (so that the daemon works on one message while the next gathers); Flush
// sends them at once. Receive never waits for another thread's write: what
// it would send then goes once that write ends. Submit waits for one only
// when what it holds is full. The daemon likewise answers executions that
// finish together in one message. (With a daemon that speaks only protocol
// version 1, each execution goes in a message of its own at once.)
class RemoteGraph {
 public:
  struct Options {
    int n_copies = 1;
    // Daemon device names, highest priority first; empty means all.
    std::vector<std::string> devices;
  };

  // Leafs without remote data are the graph's inputs; tensors wanted as
  // outputs should be flagged kFlagOutput or be results (not consumed).
  // Errors: those of EncodeGraph and the daemon's RegisterGraph.
  static absl::StatusOr<std::unique_ptr<RemoteGraph>> Register(
      Client& client, const Graph& graph, const Options& options);
  // Ends the stream and releases the graph (errors are logged).
  ~RemoteGraph();

  uint32_t n_splits() const { return n_splits_; }
  uint64_t handle() const { return handle_; }
  // Compute buffer bytes per daemon device.
  const std::vector<std::pair<std::string, uint64_t>>& compute_bytes() const {
    return compute_bytes_;
  }

  // Queues one execution with `inputs` (inline bytes, copied) returning
  // `outputs`: sends it, or holds it while an earlier one is unanswered
  // (see above). Errors: INVALID_ARGUMENT for a tensor not in the graph;
  // UNAVAILABLE when the stream has broken.
  absl::Status Submit(absl::Span<const TensorInput> inputs,
                      absl::Span<const Tensor* const> outputs);
  // The next execution's result, copied into `outputs` (the tensors of its
  // Submit, in order). Errors: the execution's status from the daemon.
  absl::Status Receive(absl::Span<const TensorOutput> outputs);
  // Submit then Receive.
  absl::Status Run(absl::Span<const TensorInput> inputs,
                   absl::Span<const TensorOutput> outputs);
  // Sends the executions Submit holds now (or, when another thread is
  // writing, once its write ends). Errors: UNAVAILABLE when the stream has
  // broken.
  absl::Status Flush();

 private:
  // Executions (and responses) one message carries at most.
  static constexpr uint32_t kMaxExecutionsPerMessage = 16;

  RemoteGraph(Client& client, EncodedGraph encoded);

  // Whether the stream has ended (its status is known).
  bool ended();
  // Ends the stream: its status, from the one Finish a gRPC stream allows.
  absl::Status End();
  // UNAVAILABLE naming the ended stream's status `end`.
  absl::Status Ended(const absl::Status& end) const;
  // Executions sent and not yet answered (read off the stream).
  uint64_t Unanswered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the executions held, in one message, while send_held_ is set and
  // no other thread is writing (releasing mu_ for each write).
  absl::Status SendHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Client& client_;
  const EncodedGraph encoded_;
  // Executions one message carries at most: 1 over protocol version 1.
  const uint32_t max_held_;
  // Submit holds executions of up to this many bytes in all.
  const size_t max_held_bytes_;
  uint64_t handle_ = 0;
  uint32_t n_splits_ = 0;
  std::vector<std::pair<std::string, uint64_t>> compute_bytes_;
  grpc::ClientContext context_;
  std::unique_ptr<ExecuteStream> stream_;
  // Never held across a call on the stream.
  absl::Mutex mu_;
  uint64_t next_tag_ ABSL_GUARDED_BY(mu_) = 0;
  // Executions submitted and not yet sent: held_ of them, of held_bytes_,
  // the later ones in held_message_.more.
  v1::ExecuteRequest held_message_ ABSL_GUARDED_BY(mu_);
  uint32_t held_ ABSL_GUARDED_BY(mu_) = 0;
  size_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The held executions are to be sent (by the thread writing, if one is).
  bool send_held_ ABSL_GUARDED_BY(mu_) = false;
  // A thread is in the stream's Write.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Responses read off the stream.
  uint64_t answered_ ABSL_GUARDED_BY(mu_) = 0;
  // The receiving thread's: responses read and not yet received (a message
  // may carry several), and the tag of the next result to receive.
  std::deque<v1::ExecuteResponse> received_;
  uint64_t next_result_ = 0;
  // The stream's status once it has ended; after that neither Submit nor
  // Receive touches the stream (gRPC aborts on a second Finish, or a read
  // after it).
  absl::Mutex end_mu_;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(end_mu_);
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_REMOTE_GRAPH_H_
