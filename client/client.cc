#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/bearer_token.h"
#include "client/borrowed_slices.h"
#include "client/graph_encoder.h"
#include "client/raw_stream_call.h"
#include "grpcpp/security/credentials.h"
#include "proto/chunk_wire.h"
#include "proto/raw_message.h"
#include "proto/value_codec.h"
#include "spdlog/spdlog.h"

namespace tessera::client {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

Client::Client(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)), stub_(v1::Tessera::NewStub(channel_)) {}

namespace {

std::shared_ptr<grpc::ChannelCredentials> Credentials(
    const ClientOptions& options) {
  if (!options.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.tls_root_certs;
  ssl.pem_cert_chain = options.tls_client_cert;
  ssl.pem_private_key = options.tls_client_key;
  return grpc::SslCredentials(ssl);
}

// The deadline of a call that waits up to `timeout_ms` (0: the daemon's
// 60 s) for the other ranks of a collective group: the daemon gives up at
// its timeout, the call a little later.
std::chrono::system_clock::time_point CommDeadline(uint32_t timeout_ms) {
  const absl::Duration timeout =
      timeout_ms == 0 ? absl::Seconds(60) : absl::Milliseconds(timeout_ms);
  return absl::ToChronoTime(absl::Now() + timeout + absl::Seconds(30));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const std::string& target, const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  if (!options.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!options.token.empty()) {
    interceptors.push_back(BearerTokenInterceptor(options.token));
  }
  std::unique_ptr<Client> client(
      new Client(grpc::experimental::CreateCustomChannelWithInterceptors(
          target, Credentials(options), args, std::move(interceptors))));
  v1::HelloRequest request;
  request.set_min_version(options.min_version);
  request.set_max_version(options.max_version);
  request.set_client_name(options.name);
  v1::HelloResponse response;
  // Waits for the connection; if it never comes, one Hello that does not
  // wait tells why (refused connection, TLS handshake, ...).
  const bool connected = client->channel_->WaitForConnected(
      absl::ToChronoTime(absl::Now() + options.connect_timeout));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(
      absl::Now() + (connected ? options.connect_timeout : absl::Seconds(5))));
  const absl::Status status =
      FromGrpc(client->stub_->Hello(&context, request, &response));
  if (!status.ok()) {
    const char* what =
        absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)
            ? "cannot reach the daemon: "
        : absl::IsUnauthenticated(status)
            ? "the daemon refused the credentials: "
            : "";
    return absl::Status(status.code(), absl::StrCat("[Connect ", target, "] ",
                                                    what, status.message()));
  }
  client->session_ = response.session();
  client->version_ = response.version();
  client->server_version_ = response.server_version();
  client->limits_ = response.limits();
  TESSERA_RETURN_IF_ERROR(client->Attach());
  return client;
}

absl::Status Client::Attach() {
  v1::AttachRequest request;
  request.set_session(session_);
  attach_ = stub_->Attach(&attach_context_, request);
  attach_reader_ = std::thread([this] {
    v1::AttachEvent event;
    while (attach_->Read(&event)) {
      if (event.kind() == v1::AttachEvent::DRAINING) {
        spdlog::info("session {}: the daemon is draining", session_);
      }
    }
  });
  return absl::OkStatus();
}

Client::~Client() {
  if (attach_ == nullptr) return;  // Connect failed before the session
  v1::CloseSessionRequest request;
  request.set_session(session_);
  v1::CloseSessionResponse response;
  grpc::ClientContext context;
  if (absl::Status s =
          FromGrpc(stub_->CloseSession(&context, request, &response));
      !s.ok()) {
    spdlog::warn("closing session {}: {}", session_, s.ToString());
  }
  attach_context_.TryCancel();
  if (attach_reader_.joinable()) attach_reader_.join();
  attach_->Finish().ok();
}

absl::StatusOr<std::vector<v1::DeviceInfo>> Client::ListDevices() {
  v1::ListDevicesRequest request;
  request.set_session(session_);
  v1::ListDevicesResponse response;
  grpc::ClientContext context;
  TESSERA_RETURN_IF_ERROR(
      FromGrpc(stub_->ListDevices(&context, request, &response)));
  return std::vector<v1::DeviceInfo>(response.devices().begin(),
                                     response.devices().end());
}

absl::StatusOr<RemoteBufferInfo> Client::AllocBuffer(
    const std::string& device, uint64_t size, BufferUsage usage,
    const std::string& buffer_type, absl::Span<const v1::PlacedTensor> placed) {
  v1::AllocBufferRequest request;
  request.set_session(session_);
  request.set_device(device);
  request.set_size(size);
  request.set_usage(wire::ToProto(usage));
  request.set_buffer_type(buffer_type);
  request.mutable_placed()->Add(placed.begin(), placed.end());
  v1::AllocBufferResponse response;
  grpc::ClientContext context;
  TESSERA_RETURN_IF_ERROR(
      FromGrpc(stub_->AllocBuffer(&context, request, &response)));
  return RemoteBufferInfo{.handle = response.buffer(),
                          .size = response.size(),
                          .alignment = response.alignment()};
}

absl::Status Client::FreeBuffer(uint64_t buffer) {
  v1::FreeBufferRequest request;
  request.set_session(session_);
  request.set_buffer(buffer);
  v1::FreeBufferResponse response;
  grpc::ClientContext context;
  return FromGrpc(stub_->FreeBuffer(&context, request, &response));
}

absl::Status Client::ClearBuffer(uint64_t buffer, uint8_t value) {
  v1::ClearBufferRequest request;
  request.set_session(session_);
  request.set_buffer(buffer);
  request.set_value(value);
  v1::ClearBufferResponse response;
  grpc::ClientContext context;
  return FromGrpc(stub_->ClearBuffer(&context, request, &response));
}

absl::StatusOr<uint64_t> Client::GetAllocSize(const std::string& device,
                                              const Tensor& t) {
  v1::GetAllocSizeRequest request;
  request.set_session(session_);
  request.set_device(device);
  request.set_type(static_cast<int32_t>(t.type));
  for (int64_t n : t.ne) request.add_ne(n);
  v1::GetAllocSizeResponse response;
  grpc::ClientContext context;
  TESSERA_RETURN_IF_ERROR(
      FromGrpc(stub_->GetAllocSize(&context, request, &response)));
  return response.size();
}

absl::Status Client::WriteTensor(const v1::TensorRef& dst, const void* data,
                                 uint64_t size, const WriteOptions& options) {
  v1::WriteTensorRequest request;
  v1::WriteTensorRequest::Header* header = request.mutable_header();
  header->set_session(session_);
  *header->mutable_dst() = dst;
  header->set_size(size);
  if (options.hash != nullptr) {
    *header->mutable_hash() = wire::ToProto(*options.hash);
  }
  if (options.layout != nullptr) *header->mutable_layout() = *options.layout;
  std::optional<grpc::ByteBuffer> first(std::in_place);
  TESSERA_RETURN_IF_ERROR(wire::SerializeRaw(request, "[WriteTensor]", *first));
  const uint64_t chunk = wire::StreamChunkBytes(limits_.max_chunk_bytes());
  const char* bytes = static_cast<const char*>(data);
  uint64_t done = 0;
  // Declared before the call so that it outlives every chunk slice.
  BorrowedSlices borrowed;
  RawStreamHandlers handlers;
  handlers.next_write = [&]() -> std::optional<grpc::ByteBuffer> {
    if (first.has_value()) return std::exchange(first, std::nullopt);
    if (done == size) return std::nullopt;
    const uint64_t n = std::min(chunk, size - done);
    grpc::Slice slice = borrowed.Borrow(bytes + done, n);
    if (options.progress && done > 0) options.progress(done);
    done += n;
    return wire::ChunkMessage(wire::kWriteTensorChunkField, std::move(slice));
  };
  handlers.on_read = [](const grpc::ByteBuffer&) { return absl::OkStatus(); };
  TESSERA_RETURN_IF_ERROR(
      RunRawStreamCall(*channel_, "/tessera.v1.Tessera/WriteTensor", handlers));
  if (options.progress) options.progress(size);
  return absl::OkStatus();
}

absl::StatusOr<bool> Client::WriteTensorByHash(const v1::TensorRef& dst,
                                               uint64_t size,
                                               const wire::ContentHash& hash) {
  v1::WriteTensorByHashRequest request;
  request.set_session(session_);
  *request.mutable_dst() = dst;
  request.set_size(size);
  *request.mutable_hash() = wire::ToProto(hash);
  v1::WriteTensorByHashResponse response;
  grpc::ClientContext context;
  TESSERA_RETURN_IF_ERROR(
      FromGrpc(stub_->WriteTensorByHash(&context, request, &response)));
  return response.found();
}

absl::Status Client::WriteTensorCached(const v1::TensorRef& dst,
                                       const void* data, uint64_t size) {
  const wire::ContentHash hash = wire::HashContent(
      data, size,
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  TESSERA_ASSIGN_OR_RETURN(bool found, WriteTensorByHash(dst, size, hash));
  if (found) return absl::OkStatus();
  return WriteTensor(dst, data, size, {.hash = &hash});
}

absl::Status Client::ReadTensor(const v1::TensorRef& src, void* data,
                                uint64_t size, const v1::TensorLayout* layout) {
  v1::ReadTensorRequest request;
  request.set_session(session_);
  *request.mutable_src() = src;
  request.set_size(size);
  if (layout != nullptr) *request.mutable_layout() = *layout;
  std::optional<grpc::ByteBuffer> first(std::in_place);
  TESSERA_RETURN_IF_ERROR(wire::SerializeRaw(request, "[ReadTensor]", *first));
  uint8_t* out = static_cast<uint8_t*>(data);
  uint64_t done = 0;
  auto too_much = [&](uint64_t n) {
    return absl::DataLossError(absl::StrCat("[ReadTensor] the daemon sent ",
                                            done + n, " bytes of the ", size,
                                            " asked"));
  };
  RawStreamHandlers handlers;
  handlers.next_write = [&] { return std::exchange(first, std::nullopt); };
  handlers.on_read = [&](const grpc::ByteBuffer& message) -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(
        std::optional<wire::Chunk> chunk,
        wire::FindChunk(message, wire::kReadTensorChunkField));
    if (chunk.has_value()) {
      if (chunk->size() > size - done) return too_much(chunk->size());
      TESSERA_RETURN_IF_ERROR(chunk->ForEachSpan(
          [&](size_t offset, const uint8_t* bytes, size_t n) {
            std::memcpy(out + done + offset, bytes, n);
            return absl::OkStatus();
          }));
      done += chunk->size();
      return absl::OkStatus();
    }
    v1::ReadTensorResponse response;
    if (!wire::ParseRaw(message, response)) {
      return absl::DataLossError("[ReadTensor] a message that does not parse");
    }
    if (response.chunk().size() > size - done) {
      return too_much(response.chunk().size());
    }
    std::memcpy(out + done, response.chunk().data(), response.chunk().size());
    done += response.chunk().size();
    return absl::OkStatus();
  };
  TESSERA_RETURN_IF_ERROR(
      RunRawStreamCall(*channel_, "/tessera.v1.Tessera/ReadTensor", handlers));
  if (done != size) {
    return absl::DataLossError(
        absl::StrCat("[ReadTensor] got ", done, " of ", size, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Client::MemsetTensor(const v1::TensorRef& dst, uint8_t value,
                                  uint64_t size) {
  v1::MemsetTensorRequest request;
  request.set_session(session_);
  *request.mutable_dst() = dst;
  request.set_size(size);
  request.set_value(value);
  v1::MemsetTensorResponse response;
  grpc::ClientContext context;
  return FromGrpc(stub_->MemsetTensor(&context, request, &response));
}

absl::Status Client::CopyTensor(const v1::TensorRef& src,
                                const v1::TensorRef& dst, uint64_t size) {
  v1::CopyTensorRequest request;
  request.set_session(session_);
  *request.mutable_src() = src;
  *request.mutable_dst() = dst;
  request.set_size(size);
  v1::CopyTensorResponse response;
  grpc::ClientContext context;
  return FromGrpc(stub_->CopyTensor(&context, request, &response));
}

absl::StatusOr<std::string> Client::NewCommGroupId() {
  v1::NewCommGroupIdRequest request;
  request.set_session(session_);
  v1::NewCommGroupIdResponse response;
  grpc::ClientContext context;
  TESSERA_RETURN_IF_ERROR(
      FromGrpc(stub_->NewCommGroupId(&context, request, &response)));
  return std::move(*response.mutable_id());
}

absl::StatusOr<uint64_t> Client::JoinCommGroup(const std::string& device,
                                               const std::string& id, int ranks,
                                               int rank,
                                               absl::Duration timeout) {
  v1::JoinCommGroupRequest request;
  request.set_session(session_);
  request.set_device(device);
  request.set_id(id);
  request.set_ranks(ranks);
  request.set_rank(rank);
  request.set_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(timeout)));
  v1::JoinCommGroupResponse response;
  grpc::ClientContext context;
  context.set_deadline(CommDeadline(request.timeout_ms()));
  TESSERA_RETURN_IF_ERROR(
      FromGrpc(stub_->JoinCommGroup(&context, request, &response)));
  return response.group();
}

absl::Status Client::LeaveCommGroup(uint64_t group) {
  v1::LeaveCommGroupRequest request;
  request.set_session(session_);
  request.set_group(group);
  v1::LeaveCommGroupResponse response;
  grpc::ClientContext context;
  return FromGrpc(stub_->LeaveCommGroup(&context, request, &response));
}

absl::Status Client::RunCollective(v1::RunCollectiveRequest& request) {
  request.set_session(session_);
  v1::RunCollectiveResponse response;
  grpc::ClientContext context;
  context.set_deadline(CommDeadline(request.timeout_ms()));
  return FromGrpc(stub_->RunCollective(&context, request, &response));
}

absl::Status Client::Compute(v1::ComputeRequest& request,
                             v1::ComputeResponse& response) {
  request.set_session(session_);
  grpc::ClientContext context;
  return FromGrpc(stub_->Compute(&context, request, &response));
}

absl::Status Client::Compute(const Graph& graph,
                             absl::Span<const TensorInput> inputs,
                             absl::Span<const TensorOutput> outputs) {
  TESSERA_ASSIGN_OR_RETURN(EncodedGraph encoded,
                           EncodeGraph(graph, *this, /*require_data=*/false));
  v1::ComputeRequest request;
  TESSERA_RETURN_IF_ERROR(
      wire::ToProto(inputs, encoded, *request.mutable_inputs()));
  for (const TensorOutput& out : outputs) {
    TESSERA_ASSIGN_OR_RETURN(uint32_t id, encoded.IdOf(out.tensor));
    request.add_outputs(id);
  }
  *request.mutable_graph() = std::move(encoded.def);
  v1::ComputeResponse response;
  TESSERA_RETURN_IF_ERROR(Compute(request, response));
  return wire::FromProto(response.outputs(), outputs);
}

absl::StatusOr<RegisteredGraphInfo> Client::RegisterGraph(
    const v1::GraphDef& graph, int n_copies,
    absl::Span<const std::string> devices) {
  v1::RegisterGraphRequest request;
  request.set_session(session_);
  *request.mutable_graph() = graph;
  request.set_n_copies(n_copies);
  for (const std::string& device : devices) request.add_devices(device);
  v1::RegisterGraphResponse response;
  grpc::ClientContext context;
  TESSERA_RETURN_IF_ERROR(
      FromGrpc(stub_->RegisterGraph(&context, request, &response)));
  RegisteredGraphInfo info{.handle = response.graph(),
                           .n_splits = response.n_splits()};
  for (const auto& [device, bytes] : response.compute_buffer_bytes()) {
    info.compute_bytes.emplace_back(device, bytes);
  }
  std::sort(info.compute_bytes.begin(), info.compute_bytes.end());
  return info;
}

std::unique_ptr<ExecuteStream> Client::OpenExecuteStream(
    grpc::ClientContext& context) {
  return stub_->Execute(&context);
}

absl::Status Client::ReleaseGraph(uint64_t graph) {
  v1::ReleaseGraphRequest request;
  request.set_session(session_);
  request.set_graph(graph);
  v1::ReleaseGraphResponse response;
  grpc::ClientContext context;
  return FromGrpc(stub_->ReleaseGraph(&context, request, &response));
}

}  // namespace tessera::client
