#include "server/ggml_rpc/connection.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "proto/ggml_rpc/tensor_codec.h"
#include "server/decoding/graph_decoder.h"
#include "server/sessions/device_reserve.h"
#include "server/sessions/devices.h"
#include "spdlog/spdlog.h"

namespace tessera::server::ggml_rpc {
namespace {

namespace proto = ::tessera::ggml_rpc;
using proto::Command;

// Host staging for buffers that are not host memory, and for copies.
constexpr size_t kStagingBytes = size_t{8} << 20;

// The largest GRAPH_COMPUTE payload a graph of `max_nodes` tensors needs.
uint64_t MaxGraphBytes(uint32_t max_nodes) {
  return proto::kGraphHeaderBytes + sizeof(uint32_t) +
         uint64_t{max_nodes} * (sizeof(uint64_t) + sizeof(proto::WireTensor));
}

// CommandMetricsLabels' entries, made once.
const std::vector<std::string>& Labels() {
  static const auto* const labels = [] {
    auto* all = new std::vector<std::string>;
    for (int c = 0; c < proto::kCommandCount; ++c) {
      all->push_back(absl::StrCat("/ggml_rpc/", proto::CommandName(c)));
    }
    return all;
  }();
  return *labels;
}

}  // namespace

std::vector<std::string> CommandMetricsLabels() { return Labels(); }

Connection::Connection(const Shared& shared, std::unique_ptr<Socket> socket)
    : shared_(shared), socket_(std::move(socket)), peer_(socket_->Peer()) {}

Connection::~Connection() {
  if (session_ != nullptr) shared_.sessions.Detach(session_->id());
}

void Connection::Serve() {
  absl::StatusOr<std::shared_ptr<Session>> session =
      shared_.sessions.Create(absl::StrCat("ggml-rpc ", peer_));
  if (session.ok()) session = shared_.sessions.Attach((*session)->id());
  if (!session.ok()) {
    spdlog::warn("[ggml-rpc] {}: no session: {}", peer_,
                 std::string(session.status().message()));
    return;
  }
  session_ = *std::move(session);
  memory_ = std::make_unique<RemoteMemory>(*session_);
  last_graph_.assign(shared_.registry.devices().size(), 0);
  if (absl::Status s = Hello(); !s.ok()) {
    spdlog::warn("[ggml-rpc] {}: HELLO: {}; closing", peer_,
                 std::string(s.message()));
    return;
  }
  spdlog::info("[ggml-rpc] {}: connected (session {})", peer_, session_->id());
  while (true) {
    uint8_t command = 0;
    if (!socket_->Read(&command, 1).ok()) break;  // the peer is done
    const InFlight::Hold hold = shared_.in_flight.Begin();
    const absl::Time start = absl::Now();
    const absl::string_view name = proto::CommandName(command);
    uint64_t size = 0;
    absl::Status status = command >= proto::kCommandCount
                              ? absl::InvalidArgumentError(absl::StrCat(
                                    "command ", command, " does not exist"))
                              : socket_->Read(&size, sizeof(size));
    if (status.ok()) status = Dispatch(static_cast<Command>(command), size);
    shared_.metrics.ObserveCall(
        command < proto::kCommandCount ? Labels()[command]
                                       : Metrics::kOtherMethod,
        static_cast<grpc::StatusCode>(status.code()), absl::Now() - start);
    if (!status.ok()) {
      spdlog::warn("[ggml-rpc] {}: {}: {}; closing", peer_, std::string(name),
                   std::string(status.message()));
      break;
    }
    session_->Touch();
  }
  spdlog::info("[ggml-rpc] {}: disconnected", peer_);
}

absl::Status Connection::Hello() {
  uint8_t command = 0;
  uint64_t size = 0;
  TESSERA_RETURN_IF_ERROR(socket_->Read(&command, 1));
  if (command != static_cast<uint8_t>(Command::kHello)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the first command is ", command, ", not HELLO"));
  }
  TESSERA_RETURN_IF_ERROR(socket_->Read(&size, sizeof(size)));
  proto::HelloRequest request;
  TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
  proto::HelloResponse response = {};
  response.major = proto::kVersionMajor;
  response.minor = proto::kVersionMinor;
  response.patch = proto::kVersionPatch;
  // No transport upgrade: capabilities stay zero.
  return socket_->WriteFrame(&response, sizeof(response));
}

template <typename T>
absl::Status Connection::ReadRequest(uint64_t size, T& request) {
  if (size != sizeof(T)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request of ", size, " bytes, want ", sizeof(T)));
  }
  return socket_->Read(&request, sizeof(T));
}

absl::StatusOr<Device*> Connection::DeviceAt(uint32_t index) const {
  const auto devices = shared_.registry.devices();
  if (index >= devices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", index, " does not exist (", devices.size(), " devices)"));
  }
  return devices[index];
}

absl::StatusOr<BufferRange> Connection::TensorRange(const proto::WireTensor& t,
                                                    uint64_t offset,
                                                    uint64_t size) const {
  return memory_->Resolve(t.buffer, t.data, offset, size);
}

absl::Status Connection::Dispatch(Command command, uint64_t size) {
  switch (command) {
    case Command::kHello:
      return absl::InvalidArgumentError("HELLO again");
    case Command::kDeviceCount: {
      if (size != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("request of ", size, " bytes, want 0"));
      }
      const proto::DeviceCountResponse response = {
          static_cast<uint32_t>(shared_.registry.devices().size())};
      return socket_->WriteFrame(&response, sizeof(response));
    }
    case Command::kAllocBuffer:
      return AllocBuffer(size);
    case Command::kGetAlignment:
    case Command::kGetMaxSize: {
      proto::DeviceRequest request;
      TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
      TESSERA_ASSIGN_OR_RETURN(Device * device, DeviceAt(request.device));
      const BufferType& type = device->buffer_type();
      const proto::U64Response response = {command == Command::kGetAlignment
                                               ? type.alignment()
                                               : type.max_size()};
      return socket_->WriteFrame(&response, sizeof(response));
    }
    case Command::kBufferGetBase: {
      proto::BufferRequest request;
      TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
      TESSERA_ASSIGN_OR_RETURN(const uint64_t base,
                               memory_->Base(request.remote_ptr));
      const proto::BufferGetBaseResponse response = {base};
      return socket_->WriteFrame(&response, sizeof(response));
    }
    case Command::kFreeBuffer: {
      proto::BufferRequest request;
      TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
      TESSERA_RETURN_IF_ERROR(memory_->Free(request.remote_ptr));
      return socket_->WriteFrame(nullptr, 0);
    }
    case Command::kBufferClear: {
      proto::BufferClearRequest request;
      TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
      TESSERA_RETURN_IF_ERROR(memory_->Base(request.remote_ptr).status());
      TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                               session_->FindBuffer(request.remote_ptr));
      TESSERA_RETURN_IF_ERROR(buffer->Clear(request.value));
      return socket_->WriteFrame(nullptr, 0);
    }
    case Command::kSetTensor:
      return SetTensor(size);
    case Command::kSetTensorHash:
      return SetTensorHash(size);
    case Command::kGetTensor:
      return GetTensor(size);
    case Command::kCopyTensor:
      return CopyTensor(size);
    case Command::kMemsetTensor:
      return MemsetTensor(size);
    case Command::kInitTensor:
      return InitTensor(size);
    case Command::kGetAllocSize:
      return GetAllocSize(size);
    case Command::kGraphCompute:
      return GraphCompute(size);
    case Command::kGraphRecompute:
      return GraphRecompute(size);
    case Command::kGetDeviceMemory: {
      proto::DeviceRequest request;
      TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
      TESSERA_ASSIGN_OR_RETURN(Device * device, DeviceAt(request.device));
      const DeviceProps props = device->Props();
      const proto::GetDeviceMemoryResponse response = {props.memory_free,
                                                       props.memory_total};
      return socket_->WriteFrame(&response, sizeof(response));
    }
  }
  return absl::InvalidArgumentError("unknown command");
}

// Running out of memory (or quota) answers a null pointer, as ggml does;
// a new buffer is cleared so that no client sees memory another one left.
absl::Status Connection::AllocBuffer(uint64_t size) {
  proto::AllocBufferRequest request;
  TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
  // By value: the packed size is not 8-byte aligned.
  const uint64_t requested = request.size;
  TESSERA_ASSIGN_OR_RETURN(Device * device, DeviceAt(request.device));
  BufferType& type = device->buffer_type();
  auto allocate = [&]() -> absl::StatusOr<proto::AllocBufferResponse> {
    if (requested > type.max_size()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          requested, " bytes exceed the max_size ", type.max_size()));
    }
    TESSERA_ASSIGN_OR_RETURN(MemoryCharge charge,
                             session_->Reserve(requested, "ALLOC_BUFFER"));
    TESSERA_RETURN_IF_ERROR(CheckDeviceReserve(
        *device, requested, shared_.limits.device_memory_reserve));
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                             type.Alloc(std::max<uint64_t>(requested, 1)));
    TESSERA_RETURN_IF_ERROR(buffer->Clear(0));
    const uint64_t buffer_size = buffer->size();
    TESSERA_ASSIGN_OR_RETURN(
        const uint64_t handle,
        session_->AddBuffer(std::move(buffer), std::move(charge)));
    if (absl::StatusOr<uint64_t> base =
            memory_->Add(handle, buffer_size, type.alignment());
        !base.ok()) {
      session_->FreeBuffer(handle).IgnoreError();
      return base.status();
    }
    return proto::AllocBufferResponse{handle, buffer_size};
  };
  absl::StatusOr<proto::AllocBufferResponse> response = allocate();
  if (!response.ok()) {
    spdlog::info("[ggml-rpc] {}: ALLOC_BUFFER of {} bytes on {}: {}", peer_,
                 requested, device->name(),
                 std::string(response.status().message()));
    response = proto::AllocBufferResponse{0, 0};
  }
  return socket_->WriteFrame(&*response, sizeof(*response));
}

// The data goes from the socket straight into host memory, or through
// staging pieces into other memory; nothing is allocated by the size the
// client claims.
absl::Status Connection::SetTensor(uint64_t size) {
  proto::SetTensorHeader header;
  if (size < sizeof(header)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request of ", size, " bytes is shorter than its header"));
  }
  TESSERA_RETURN_IF_ERROR(socket_->Read(&header, sizeof(header)));
  const uint64_t bytes = size - sizeof(header);
  TESSERA_ASSIGN_OR_RETURN(const BufferRange range,
                           TensorRange(header.tensor, header.offset, bytes));
  Buffer& buffer = *range.buffer;
  if (buffer.type().is_host()) {
    TESSERA_RETURN_IF_ERROR(
        socket_->Read(static_cast<char*>(buffer.base()) + range.offset, bytes));
  } else {
    std::vector<char> piece(std::min<uint64_t>(bytes, kStagingBytes));
    for (uint64_t at = 0; at < bytes; at += piece.size()) {
      const size_t n = std::min<uint64_t>(piece.size(), bytes - at);
      TESSERA_RETURN_IF_ERROR(socket_->Read(piece.data(), n));
      TESSERA_RETURN_IF_ERROR(buffer.Write(range.offset + at, piece.data(), n));
    }
  }
  shared_.metrics.AddReceived(bytes);
  if (shared_.cache != nullptr && bytes > ContentCache::kMinBytes) {
    shared_.cache->Put(range);
  }
  return absl::OkStatus();
}

absl::Status Connection::SetTensorHash(uint64_t size) {
  proto::SetTensorHashRequest request;
  TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
  proto::ResultResponse response = {0};
  if (shared_.cache != nullptr) {
    // Fields by value (protocol.h).
    const uint64_t remote_ptr = request.tensor.buffer;
    const uint64_t data = request.tensor.data;
    const uint64_t offset = request.offset;
    // The range from the tensor's address to its buffer's end.
    TESSERA_ASSIGN_OR_RETURN(const uint64_t base, memory_->Base(remote_ptr));
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                             session_->FindBuffer(remote_ptr));
    const uint64_t end = base + buffer->size();
    const uint64_t at = data + offset;
    if (data < base || at < data || at > end) {
      return absl::InvalidArgumentError(
          absl::StrCat("address 0x", absl::Hex(data), " + ", offset,
                       " is not in buffer 0x", absl::Hex(remote_ptr)));
    }
    TESSERA_ASSIGN_OR_RETURN(const BufferRange range,
                             TensorRange(request.tensor, offset, end - at));
    TESSERA_ASSIGN_OR_RETURN(std::optional<size_t> placed,
                             shared_.cache->Place(request.hash, range));
    response.result = placed.has_value() ? 1 : 0;
  }
  return socket_->WriteFrame(&response, sizeof(response));
}

absl::Status Connection::GetTensor(uint64_t size) {
  proto::GetTensorRequest request;
  TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
  TESSERA_ASSIGN_OR_RETURN(
      const BufferRange range,
      TensorRange(request.tensor, request.offset, request.size));
  Buffer& buffer = *range.buffer;
  if (buffer.type().is_host()) {
    TESSERA_RETURN_IF_ERROR(socket_->WriteFrame(
        static_cast<const char*>(buffer.base()) + range.offset, range.size));
  } else {
    const uint64_t size64 = range.size;
    TESSERA_RETURN_IF_ERROR(socket_->Write(&size64, sizeof(size64)));
    std::vector<char> piece(std::min<uint64_t>(range.size, kStagingBytes));
    for (uint64_t at = 0; at < range.size; at += piece.size()) {
      const size_t n = std::min<uint64_t>(piece.size(), range.size - at);
      TESSERA_RETURN_IF_ERROR(buffer.Read(range.offset + at, piece.data(), n));
      TESSERA_RETURN_IF_ERROR(socket_->Write(piece.data(), n));
    }
  }
  shared_.metrics.AddSent(range.size);
  return absl::OkStatus();
}

// A destination too small for the source ends the connection, as ggml's
// server does; result 1 otherwise.
absl::Status Connection::CopyTensor(uint64_t size) {
  proto::CopyTensorRequest request;
  TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
  TESSERA_ASSIGN_OR_RETURN(const uint64_t bytes,
                           proto::TensorBytes(request.src));
  TESSERA_ASSIGN_OR_RETURN(const BufferRange src,
                           TensorRange(request.src, 0, bytes));
  TESSERA_ASSIGN_OR_RETURN(const BufferRange dst,
                           TensorRange(request.dst, 0, bytes));
  TESSERA_RETURN_IF_ERROR(CopyRange(src, dst, kStagingBytes));
  const proto::ResultResponse response = {1};
  return socket_->WriteFrame(&response, sizeof(response));
}

absl::Status Connection::MemsetTensor(uint64_t size) {
  proto::MemsetTensorRequest request;
  TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
  TESSERA_ASSIGN_OR_RETURN(const uint64_t bytes,
                           proto::TensorBytes(request.tensor));
  // Fields by value (protocol.h).
  const uint64_t offset = request.offset;
  const uint64_t length = request.size;
  if (offset > bytes || length > bytes - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("range of ", length, " bytes at offset ", offset,
                     " is outside the tensor's ", bytes));
  }
  TESSERA_ASSIGN_OR_RETURN(const BufferRange range,
                           TensorRange(request.tensor, offset, length));
  TESSERA_RETURN_IF_ERROR(
      range.buffer->Memset(range.offset, request.value, range.size));
  return socket_->WriteFrame(nullptr, 0);
}

// tessera's buffers need no per-tensor set-up; the tensor is checked.
absl::Status Connection::InitTensor(uint64_t size) {
  proto::InitTensorRequest request;
  TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
  TESSERA_ASSIGN_OR_RETURN(const uint64_t bytes,
                           proto::TensorBytes(request.tensor));
  if (request.tensor.buffer != 0) {
    TESSERA_RETURN_IF_ERROR(TensorRange(request.tensor, 0, bytes).status());
  }
  return socket_->WriteFrame(nullptr, 0);
}

// tessera's buffer types take a tensor's byte span (ggml_nbytes).
absl::Status Connection::GetAllocSize(uint64_t size) {
  // Read in place: the request is 3 KiB.
  auto request = std::make_unique<proto::GetAllocSizeRequest>();
  TESSERA_RETURN_IF_ERROR(ReadRequest(size, *request));
  TESSERA_RETURN_IF_ERROR(DeviceAt(request->device).status());
  TESSERA_ASSIGN_OR_RETURN(const uint64_t bytes,
                           proto::TensorBytes(request->tensor));
  if (request->tensor.buffer != 0) {
    TESSERA_RETURN_IF_ERROR(memory_->Base(request->tensor.buffer).status());
  }
  const proto::U64Response response = {bytes};
  return socket_->WriteFrame(&response, sizeof(response));
}

// 1. Parse the payload into a GraphDef, resolving remote pointers.
// 2. Decode and validate it as any graph (server/decoding), place and
//    allocate it on the device (a CPU device joins as fallback).
// 3. Keep it in the session (its memory counts against the quota and is
//    freed with the session) as the device's last graph, and run it.
absl::Status Connection::GraphCompute(uint64_t size) {
  const uint32_t max_nodes = shared_.limits.max_graph_nodes;
  if (size > MaxGraphBytes(max_nodes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph of ", size, " bytes exceeds the ", MaxGraphBytes(max_nodes),
        " that max_graph_nodes ", max_nodes, " allows"));
  }
  std::vector<uint8_t> payload(size);
  TESSERA_RETURN_IF_ERROR(socket_->Read(payload.data(), payload.size()));
  const proto::PlaceFn place =
      [this](uint64_t buffer, uint64_t data,
             uint64_t bytes) -> absl::StatusOr<v1::TensorRef> {
    TESSERA_ASSIGN_OR_RETURN(const BufferRange range,
                             memory_->Resolve(buffer, data, 0, bytes));
    v1::TensorRef ref;
    ref.set_buffer(range.handle);
    ref.set_offset(range.offset);
    return ref;
  };
  TESSERA_ASSIGN_OR_RETURN(proto::GraphRequest request,
                           proto::ParseGraph(payload, max_nodes, place));
  TESSERA_ASSIGN_OR_RETURN(Device * device, DeviceAt(request.device));
  if (request.def.nodes_size() == 0) {
    // Every node is one without an op: ggml computes nothing.
    SetLastGraph(request.device, kNothingToCompute);
    return absl::OkStatus();
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<Device*> devices,
                           SelectDevices(shared_.registry, {device->name()}));
  const BufferResolver resolve = [this](uint64_t handle) {
    return session_->FindBuffer(handle);
  };
  DecodeLimits decode_limits;
  decode_limits.max_tensors = max_nodes;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DecodedGraph> decoded,
                           DecodeGraph(request.def, resolve, decode_limits));
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<RegisteredGraph> registered,
      RegisteredGraph::Create(std::move(decoded), devices, 1, shared_.limits,
                              RegisteredGraph::Runner::kCaller));
  TESSERA_ASSIGN_OR_RETURN(
      MemoryCharge charge,
      session_->Reserve(registered->memory_bytes(), "GRAPH_COMPUTE"));
  TESSERA_ASSIGN_OR_RETURN(
      const uint64_t handle,
      session_->AddGraph(std::move(registered), std::move(charge)));
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<RegisteredGraph> graph,
                           session_->FindGraph(handle));
  SetLastGraph(request.device, handle);
  return Run(*graph);
}

void Connection::SetLastGraph(uint32_t device, uint64_t handle) {
  uint64_t& last = last_graph_[device];
  if (last != 0 && last != kNothingToCompute) {
    session_->ReleaseGraph(last).IgnoreError();
  }
  last = handle;
}

absl::Status Connection::GraphRecompute(uint64_t size) {
  proto::DeviceRequest request;
  TESSERA_RETURN_IF_ERROR(ReadRequest(size, request));
  TESSERA_RETURN_IF_ERROR(DeviceAt(request.device).status());
  const uint64_t last = last_graph_[request.device];
  if (last == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", request.device, " has computed no graph yet"));
  }
  if (last == kNothingToCompute) return absl::OkStatus();
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<RegisteredGraph> graph,
                           session_->FindGraph(last));
  return Run(*graph);
}

absl::Status Connection::Run(RegisteredGraph& graph) {
  const BufferResolver resolve = [this](uint64_t handle) {
    return session_->FindBuffer(handle);
  };
  const v1::ExecuteRequest request;
  v1::ExecuteResponse response;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RegisteredGraph::Execution> run,
                           graph.Submit(request, resolve, response));
  const absl::Time start = absl::Now();
  TESSERA_RETURN_IF_ERROR(run->Wait());
  shared_.metrics.ObserveExecution(absl::Now() - start);
  return absl::OkStatus();
}

}  // namespace tessera::server::ggml_rpc
