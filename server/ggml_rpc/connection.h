#ifndef TESSERA_SERVER_GGML_RPC_CONNECTION_H_
#define TESSERA_SERVER_GGML_RPC_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/registry.h"
#include "proto/ggml_rpc/protocol.h"
#include "server/ggml_rpc/content_cache.h"
#include "server/ggml_rpc/remote_memory.h"
#include "server/ggml_rpc/socket.h"
#include "server/operations/config.h"
#include "server/operations/metrics.h"
#include "server/rpc/in_flight.h"
#include "server/sessions/registered_graph.h"
#include "server/sessions/session_manager.h"

namespace tessera::server::ggml_rpc {

// What every connection shares: the daemon's devices, sessions, drain
// counter, metrics and limits, and the content cache (null: none).
struct Shared {
  const Registry& registry;
  SessionManager& sessions;
  InFlight& in_flight;
  Metrics& metrics;
  const Limits& limits;
  ContentCache* cache;
};

// The metrics labels of the commands' calls, "/ggml_rpc/" and the
// command's name ("/ggml_rpc/GRAPH_RECOMPUTE"): methods for Metrics, as
// the gRPC service's. A byte that is no command counts as Metrics'
// kOtherMethod.
std::vector<std::string> CommandMetricsLabels();

// One ggml-rpc client: a session of its own (attached, so it does not expire
// while the connection is open) that holds its buffers and last graphs and
// is closed, freeing them, when the connection ends. Commands are served in
// order; one that cannot be served (malformed, out of bounds, refused by
// validation, failed on a device) ends the connection, the protocol's
// failure reply, and is logged with its reason. Each device keeps the last
// graph GRAPH_COMPUTE ran on it for GRAPH_RECOMPUTE. A command counts as
// work in flight (drain waits for it) from its header to its response.
class Connection {
 public:
  Connection(const Shared& shared, std::unique_ptr<Socket> socket);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Serves until the peer closes, a command fails or Shutdown. Blocks.
  void Serve();
  // Ends Serve from another thread. Thread-safe.
  void Shutdown() { socket_->Shutdown(); }

 private:
  absl::Status Hello();
  absl::Status Dispatch(tessera::ggml_rpc::Command command, uint64_t size);
  template <typename T>
  absl::Status ReadRequest(uint64_t size, T& request);
  absl::StatusOr<Device*> DeviceAt(uint32_t index) const;
  // The range of a tensor's bytes [offset, offset + size) named by `t`.
  absl::StatusOr<BufferRange> TensorRange(
      const tessera::ggml_rpc::WireTensor& t, uint64_t offset,
      uint64_t size) const;

  absl::Status AllocBuffer(uint64_t size);
  absl::Status SetTensor(uint64_t size);
  absl::Status SetTensorHash(uint64_t size);
  absl::Status GetTensor(uint64_t size);
  absl::Status CopyTensor(uint64_t size);
  absl::Status MemsetTensor(uint64_t size);
  absl::Status InitTensor(uint64_t size);
  absl::Status GetAllocSize(uint64_t size);
  absl::Status GraphCompute(uint64_t size);
  absl::Status GraphRecompute(uint64_t size);
  absl::Status Run(RegisteredGraph& graph);
  // Makes `handle` (a graph of the session, or kNothingToCompute) device
  // `device`'s last graph, releasing the one before.
  void SetLastGraph(uint32_t device, uint64_t handle);

  const Shared& shared_;
  const std::unique_ptr<Socket> socket_;
  const std::string peer_;
  std::shared_ptr<Session> session_;
  std::unique_ptr<RemoteMemory> memory_;
  // Per device: the handle of the last graph computed there (0: none;
  // kNothingToCompute: one without an op, which ggml computes as nothing).
  std::vector<uint64_t> last_graph_;
  static constexpr uint64_t kNothingToCompute = ~uint64_t{0};
};

}  // namespace tessera::server::ggml_rpc

#endif  // TESSERA_SERVER_GGML_RPC_CONNECTION_H_
