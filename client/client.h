#ifndef TESSERA_CLIENT_CLIENT_H_
#define TESSERA_CLIENT_CLIENT_H_

// A session on a tesserad daemon (proto/tessera.proto): typed calls that
// return absl::Status, with the daemon's status code and message.
//
//   auto client = Client::Connect("127.0.0.1:50051").value();
//   auto devices = client->ListDevices().value();
//   auto buf = client->AllocBuffer("cpu0", 1 << 20, BufferUsage::kWeights);
//   client->WriteTensor({buf->handle, 0}, data, size);
//
// Graphs are sent by RemoteDevice streams (client/remote_device.h) or with
// Compute/RegisterGraph here; tensors whose data is in this client's remote
// buffers travel as (buffer handle, offset).
//
// The session lives until the Client is destroyed (CloseSession) or the
// process ends (the Attach stream drops and the daemon frees it).
// Thread-safe: calls may come from many threads at once.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "backend/buffer.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "grpcpp/grpcpp.h"
#include "proto/content_hash.h"
#include "proto/tensor_data_codec.h"
#include "proto/tessera.grpc.pb.h"

namespace tessera::client {

// The protocol versions this client speaks (tessera.proto); with a daemon
// that speaks only version 1, RemoteGraph sends one execution per message.
inline constexpr uint32_t kMinProtocolVersion = 1;
inline constexpr uint32_t kProtocolVersion = 2;

struct ClientOptions {
  std::string name = "tessera-client";
  // Versions offered in Hello.
  uint32_t min_version = kMinProtocolVersion;
  uint32_t max_version = kProtocolVersion;
  // How long Connect keeps trying to reach the daemon.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Sent with every call when not empty (the daemon's --token_file).
  std::string token;
  // TLS: PEM text. With `tls` and no root certificates, the system's roots
  // are trusted; a client certificate and key are for mutual TLS.
  bool tls = false;
  std::string tls_root_certs;
  std::string tls_client_cert;
  std::string tls_client_key;
  // Overrides the name the server certificate must carry (default: the
  // target's host).
  std::string tls_server_name;
};

struct RemoteBufferInfo {
  uint64_t handle = 0;
  uint64_t size = 0;
  uint64_t alignment = 0;
};

// Optional parts of a WriteTensor.
struct WriteOptions {
  // The content hash of the bytes (proto/content_hash.h): the daemon keeps
  // them under it, so that a later WriteTensorByHash finds them.
  const wire::ContentHash* hash = nullptr;
  // Called with the bytes sent so far after each chunk.
  std::function<void(uint64_t)> progress;
  // For a META device's buffer: the bytes are this whole tensor, scattered
  // over the members by its split state (proto/split_state_codec.h).
  const v1::TensorLayout* layout = nullptr;
};

// Host data for one tensor of a graph: an input to send or an output to
// fill (`size` must be the tensor's byte size).
using TensorInput = wire::TensorInput;
using TensorOutput = wire::TensorOutput;

// A graph the daemon registered (RegisterGraph).
struct RegisteredGraphInfo {
  uint64_t handle = 0;
  uint32_t n_splits = 0;
  // Compute buffer bytes by daemon device, sorted by device name.
  std::vector<std::pair<std::string, uint64_t>> compute_bytes;
};

// The Execute stream of registered graphs (see RegisterGraph).
using ExecuteStream =
    grpc::ClientReaderWriter<v1::ExecuteRequest, v1::ExecuteResponse>;

class Client {
 public:
  // Connects, negotiates the version and opens a session held by an Attach
  // stream. Errors: UNAVAILABLE when the daemon cannot be reached within
  // options.connect_timeout (the message carries gRPC's reason, e.g. a TLS
  // handshake failure); UNAUTHENTICATED for a missing or wrong token;
  // FAILED_PRECONDITION when no version is shared; the daemon's status.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& target, const ClientOptions& options = {});
  // Closes the session (errors are logged).
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& session() const { return session_; }
  uint32_t version() const { return version_; }
  const v1::ServerLimits& limits() const { return limits_; }
  const std::string& server_version() const { return server_version_; }

  absl::StatusOr<std::vector<v1::DeviceInfo>> ListDevices();

  // Buffers, by handle.
  // `placed`: a meta device's packed weights (AllocBufferRequest.placed).
  absl::StatusOr<RemoteBufferInfo> AllocBuffer(
      const std::string& device, uint64_t size, BufferUsage usage,
      const std::string& buffer_type = "",
      absl::Span<const v1::PlacedTensor> placed = {});
  absl::Status FreeBuffer(uint64_t buffer);
  absl::Status ClearBuffer(uint64_t buffer, uint8_t value);
  absl::StatusOr<uint64_t> GetAllocSize(const std::string& device,
                                        const Tensor& t);

  // Byte ranges of buffers. Writes stream chunks of the daemon's
  // max_chunk_bytes; any size works (over 2 GiB too).
  absl::Status WriteTensor(const v1::TensorRef& dst, const void* data,
                           uint64_t size, const WriteOptions& options = {});
  // Fills the range from content the daemon already holds under `hash`;
  // false when it holds none (nothing was written).
  absl::StatusOr<bool> WriteTensorByHash(const v1::TensorRef& dst,
                                         uint64_t size,
                                         const wire::ContentHash& hash);
  // WriteTensorByHash, and WriteTensor with the hash when the daemon lacks
  // the content: a second load of the same bytes sends none. Hashes on
  // every hardware thread.
  absl::Status WriteTensorCached(const v1::TensorRef& dst, const void* data,
                                 uint64_t size);
  // `layout`: a meta device's split tensor, gathered by the daemon
  // (ReadTensorRequest.layout).
  absl::Status ReadTensor(const v1::TensorRef& src, void* data, uint64_t size,
                          const v1::TensorLayout* layout = nullptr);
  absl::Status MemsetTensor(const v1::TensorRef& dst, uint8_t value,
                            uint64_t size);
  absl::Status CopyTensor(const v1::TensorRef& src, const v1::TensorRef& dst,
                          uint64_t size);

  // Collective groups spanning daemons (proto/tessera.proto); see
  // client/spanning_communicator.h.
  absl::StatusOr<std::string> NewCommGroupId();
  // Blocks until every rank has joined; returns the group's handle.
  absl::StatusOr<uint64_t> JoinCommGroup(const std::string& device,
                                         const std::string& id, int ranks,
                                         int rank, absl::Duration timeout);
  absl::Status LeaveCommGroup(uint64_t group);
  // The session is filled in.
  absl::Status RunCollective(v1::RunCollectiveRequest& request);

  // One-shot compute of `graph` on the daemon: `inputs` are leafs without
  // remote data (sent inline), `outputs` are filled from the results.
  absl::Status Compute(const Graph& graph, absl::Span<const TensorInput> inputs,
                       absl::Span<const TensorOutput> outputs);
  // Sends raw requests (the session is filled in).
  absl::Status Compute(v1::ComputeRequest& request,
                       v1::ComputeResponse& response);

  // Registers `graph` for executions with `n_copies` in flight over the
  // daemon's `devices` (highest priority first; empty: all).
  // Errors: the daemon's RegisterGraph status.
  absl::StatusOr<RegisteredGraphInfo> RegisterGraph(
      const v1::GraphDef& graph, int n_copies,
      absl::Span<const std::string> devices);
  // Opens an Execute stream under `context`, which must outlive it.
  // Requests name the session and a registered graph; the daemon answers
  // each in order (proto/tessera.proto).
  std::unique_ptr<ExecuteStream> OpenExecuteStream(
      grpc::ClientContext& context);
  absl::Status ReleaseGraph(uint64_t graph);

 private:
  Client(std::shared_ptr<grpc::Channel> channel);
  absl::Status Attach();

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Tessera::Stub> stub_;
  std::string session_;
  uint32_t version_ = 0;
  std::string server_version_;
  v1::ServerLimits limits_;
  // The Attach stream and the thread that reads it until it ends.
  grpc::ClientContext attach_context_;
  std::unique_ptr<grpc::ClientReader<v1::AttachEvent>> attach_;
  std::thread attach_reader_;
};

// The status a gRPC call returned, as an absl::Status.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_CLIENT_H_
