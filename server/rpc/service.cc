#include "server/rpc/service.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/context.h"
#include "proto/device_codec.h"
#include "proto/value_codec.h"
#include "base/status_macros.h"
#include "server/rpc/attach_reactor.h"
#include "server/decoding/buffer_range.h"
#include "server/decoding/split_tensor.h"
#include "server/sessions/device_reserve.h"
#include "server/sessions/compute.h"
#include "server/sessions/devices.h"
#include "server/rpc/execute_reactor.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/tensor_streams.h"
#include "spdlog/spdlog.h"

namespace tessera::server {
namespace {

constexpr char kServerVersion[] = "tesserad 0.1.0";

// Host staging for copies between devices.
constexpr size_t kStagingBytes = size_t{64} << 20;

// The device's buffer type named `name` (empty: its own memory).
absl::StatusOr<BufferType*> FindBufferType(Device& device,
                                           const std::string& name) {
  if (name.empty() || name == device.buffer_type().name()) {
    return &device.buffer_type();
  }
  if (BufferType* host = device.host_buffer_type();
      host != nullptr && name == host->name()) {
    return host;
  }
  return absl::NotFoundError(absl::StrCat("[AllocBuffer] buffer_type: device ",
                                          device.name(), " has no buffer type \"",
                                          name, "\""));
}

absl::StatusOr<uint8_t> ByteValue(absl::string_view where, uint32_t value) {
  if (value > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " value: ", value, " is not a byte (0..255)"));
  }
  return static_cast<uint8_t>(value);
}

// A stream call refused before it starts.
template <typename Reactor>
Reactor* Refuse(const absl::Status& status) {
  class Refusal final : public Reactor {
   public:
    explicit Refusal(const absl::Status& s) { this->Finish(ToGrpc(s)); }
    void OnDone() override { delete this; }
  };
  return new Refusal(status);
}

// A unary call whose work runs on the work queue, counted in flight until
// its status is sent.
class OffloadedCall final : public grpc::ServerUnaryReactor {
 public:
  explicit OffloadedCall(InFlight::Hold hold) : hold_(std::move(hold)) {}
  void OnDone() override { delete this; }

 private:
  const InFlight::Hold hold_;
};

}  // namespace

Service::Service(const Registry& registry, SessionManager& sessions,
                 WorkQueue& work, InFlight& in_flight, const Limits& limits,
                 const TokenAuth& auth, Metrics& metrics, ContentStore& store)
    : registry_(registry),
      sessions_(sessions),
      work_(work),
      in_flight_(in_flight),
      limits_(limits),
      auth_(auth),
      metrics_(metrics),
      store_(store),
      streams_{sessions_, limits_, metrics_, store_, in_flight_},
      max_comm_waits_(std::max(1, work_.threads() / 2)) {}

grpc::ServerUnaryReactor* Service::Done(grpc::CallbackServerContext* context,
                                        const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpc(status));
  return reactor;
}

grpc::ServerUnaryReactor* Service::Offload(
    grpc::CallbackServerContext* context, absl::string_view session,
    std::function<absl::Status()> body) {
  if (absl::Status s = auth_.Check(*context); !s.ok()) {
    return Done(context, s);
  }
  auto* reactor = new OffloadedCall(in_flight_.Begin());
  work_.Post(session, [reactor, body = std::move(body)] {
    reactor->Finish(ToGrpc(body()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* Service::Hello(grpc::CallbackServerContext* context,
                                         const v1::HelloRequest* request,
                                         v1::HelloResponse* response) {
  if (absl::Status s = auth_.Check(*context); !s.ok()) {
    return Done(context, s);
  }
  const uint32_t lo = std::max(request->min_version(), kMinVersion);
  const uint32_t hi = std::min(request->max_version(), kMaxVersion);
  if (lo > hi) {
    return Done(context,
                absl::FailedPreconditionError(absl::StrCat(
                    "[Hello] the client speaks versions ",
                    request->min_version(), "..", request->max_version(),
                    ", the server ", kMinVersion, "..", kMaxVersion)));
  }
  absl::StatusOr<std::shared_ptr<Session>> session =
      sessions_.Create(request->client_name());
  if (!session.ok()) return Done(context, session.status());
  spdlog::info("session {} opened by \"{}\" from {}", (*session)->id(),
               (*session)->client_name(), context->peer());
  response->set_version(hi);
  response->set_server_version(kServerVersion);
  response->set_session((*session)->id());
  v1::ServerLimits* limits = response->mutable_limits();
  limits->set_max_chunk_bytes(limits_.max_chunk_bytes);
  limits->set_max_graph_nodes(limits_.max_graph_nodes);
  limits->set_max_message_bytes(limits_.max_message_bytes);
  limits->set_max_queued_executions(static_cast<uint32_t>(
      std::min<size_t>(limits_.max_queued_executions, UINT32_MAX)));
  limits->set_session_memory_quota(limits_.session_memory_quota);
  limits->set_session_idle_timeout_ms(
      absl::ToInt64Milliseconds(sessions_.idle_timeout()));
  return Done(context, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::AttachEvent>* Service::Attach(
    grpc::CallbackServerContext* context, const v1::AttachRequest* request) {
  if (absl::Status s = auth_.Check(*context); !s.ok()) {
    return Refuse<grpc::ServerWriteReactor<v1::AttachEvent>>(s);
  }
  return NewAttachReactor(sessions_, drain_, request);
}

grpc::ServerUnaryReactor* Service::CloseSession(
    grpc::CallbackServerContext* context,
    const v1::CloseSessionRequest* request,
    v1::CloseSessionResponse* response) {
  return Offload(context, request->session(), [this, request] {
    return sessions_.Close(request->session());
  });
}

grpc::ServerUnaryReactor* Service::ListDevices(
    grpc::CallbackServerContext* context,
    const v1::ListDevicesRequest* request, v1::ListDevicesResponse* response) {
  if (absl::Status s = auth_.Check(*context); !s.ok()) {
    return Done(context, s);
  }
  absl::StatusOr<std::shared_ptr<Session>> session =
      sessions_.Find(request->session());
  if (!session.ok()) return Done(context, session.status());
  for (Device* device : registry_.devices()) {
    *response->add_devices() = wire::ToProto(wire::Describe(*device));
  }
  return Done(context, absl::OkStatus());
}

// A new buffer is cleared so that no client ever sees memory another one
// left behind.
grpc::ServerUnaryReactor* Service::AllocBuffer(
    grpc::CallbackServerContext* context,
    const v1::AllocBufferRequest* request, v1::AllocBufferResponse* response) {
  return Offload(context, request->session(), [this, request, response]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions_.Find(request->session()));
    absl::StatusOr<Device*> device = registry_.Find(request->device());
    if (!device.ok()) {
      return absl::NotFoundError(absl::StrCat("[AllocBuffer] device: ",
                                              device.status().message()));
    }
    absl::StatusOr<BufferUsage> usage = wire::FromProto(request->usage());
    if (!usage.ok()) {
      return absl::Status(
          usage.status().code(),
          absl::StrCat("[AllocBuffer] ", usage.status().message()));
    }
    TESSERA_ASSIGN_OR_RETURN(BufferType * type,
                             FindBufferType(**device, request->buffer_type()));
    if (request->size() > type->max_size()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "[AllocBuffer] size ", request->size(), " exceeds the max_size ",
          type->max_size(), " of buffer type ", std::string(type->name())));
    }
    TESSERA_ASSIGN_OR_RETURN(MemoryCharge charge,
                             session->Reserve(request->size(), "AllocBuffer"));
    if (absl::Status s = CheckDeviceReserve(type->device(), request->size(),
                                            limits_.device_memory_reserve);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("[AllocBuffer] ", s.message()));
    }
    absl::StatusOr<std::unique_ptr<Buffer>> allocated =
        request->placed().empty()
            ? type->Alloc(request->size())
            : AllocPacked(*type, request->size(), request->placed());
    if (!allocated.ok()) {
      return absl::Status(
          allocated.status().code(),
          absl::StrCat("[AllocBuffer] ", allocated.status().message()));
    }
    std::unique_ptr<Buffer> buffer = *std::move(allocated);
    buffer->set_usage(*usage);
    TESSERA_RETURN_IF_ERROR(buffer->Clear(0));
    const size_t size = buffer->size();
    TESSERA_ASSIGN_OR_RETURN(uint64_t handle,
                             session->AddBuffer(std::move(buffer),
                                                std::move(charge)));
    response->set_buffer(handle);
    response->set_size(size);
    response->set_alignment(type->alignment());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* Service::FreeBuffer(
    grpc::CallbackServerContext* context, const v1::FreeBufferRequest* request,
    v1::FreeBufferResponse* response) {
  if (absl::Status s = auth_.Check(*context); !s.ok()) {
    return Done(context, s);
  }
  absl::StatusOr<std::shared_ptr<Session>> session =
      sessions_.Find(request->session());
  if (!session.ok()) return Done(context, session.status());
  return Done(context, (*session)->FreeBuffer(request->buffer()));
}

grpc::ServerUnaryReactor* Service::ClearBuffer(
    grpc::CallbackServerContext* context,
    const v1::ClearBufferRequest* request, v1::ClearBufferResponse* response) {
  return Offload(context, request->session(), [this, request]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions_.Find(request->session()));
    TESSERA_ASSIGN_OR_RETURN(uint8_t value,
                             ByteValue("[ClearBuffer]", request->value()));
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                             session->FindBuffer(request->buffer()));
    return buffer->Clear(value);
  });
}

grpc::ServerUnaryReactor* Service::GetAllocSize(
    grpc::CallbackServerContext* context,
    const v1::GetAllocSizeRequest* request,
    v1::GetAllocSizeResponse* response) {
  if (absl::Status s = auth_.Check(*context); !s.ok()) {
    return Done(context, s);
  }
  auto body = [&]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions_.Find(request->session()));
    absl::StatusOr<Device*> device = registry_.Find(request->device());
    if (!device.ok()) {
      return absl::NotFoundError(absl::StrCat("[GetAllocSize] device: ",
                                              device.status().message()));
    }
    if (!IsValidType(request->type())) {
      return absl::InvalidArgumentError(
          absl::StrCat("[GetAllocSize] type: unknown type ", request->type()));
    }
    if (request->ne_size() < 1 || request->ne_size() > kMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat("[GetAllocSize] ne: ", request->ne_size(),
                       " dimensions, want 1 to ", kMaxDims));
    }
    Context ctx;
    absl::StatusOr<Tensor*> t =
        ctx.NewTensor(static_cast<Type>(request->type()),
                      {request->ne().data(), size_t(request->ne_size())});
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("[GetAllocSize] ", t.status().message()));
    }
    response->set_size((*device)->buffer_type().AllocSize(**t));
    return absl::OkStatus();
  };
  return Done(context, body());
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* Service::ReadTensor(
    grpc::CallbackServerContext* context,
    const grpc::ByteBuffer* request) {
  if (absl::Status s = auth_.Check(*context); !s.ok()) {
    return Refuse<grpc::ServerWriteReactor<grpc::ByteBuffer>>(s);
  }
  return NewReadTensorReactor(streams_, request);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* Service::WriteTensor(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  if (absl::Status s = auth_.Check(*context); !s.ok()) {
    return Refuse<grpc::ServerReadReactor<grpc::ByteBuffer>>(s);
  }
  return NewWriteTensorReactor(streams_, response);
}

grpc::ServerUnaryReactor* Service::WriteTensorByHash(
    grpc::CallbackServerContext* context,
    const v1::WriteTensorByHashRequest* request,
    v1::WriteTensorByHashResponse* response) {
  return Offload(context, request->session(), [this, request, response]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions_.Find(request->session()));
    TESSERA_ASSIGN_OR_RETURN(
        BufferRange range,
        ResolveRange(*session, "[WriteTensorByHash] dst",
                     request->dst().buffer(), request->dst().offset(),
                     request->size()));
    const ContentStore::Bytes bytes =
        store_.Find(wire::FromProto(request->hash()), request->size());
    std::optional<Tensor> split;
    if (request->has_layout()) {
      absl::StatusOr<Tensor> target = SplitWriteTarget(
          *range.buffer, range.offset, range.size, request->layout());
      if (!target.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "[WriteTensorByHash] ", target.status().message()));
      }
      split = *std::move(target);
    }
    if (bytes == nullptr) return absl::OkStatus();
    TESSERA_RETURN_IF_ERROR(
        WriteBytes(*range.buffer, range.offset, split, 0, bytes->data(),
                   bytes->size()));
    response->set_found(true);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* Service::MemsetTensor(
    grpc::CallbackServerContext* context,
    const v1::MemsetTensorRequest* request,
    v1::MemsetTensorResponse* response) {
  return Offload(context, request->session(), [this, request]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions_.Find(request->session()));
    TESSERA_ASSIGN_OR_RETURN(uint8_t value,
                             ByteValue("[MemsetTensor]", request->value()));
    TESSERA_ASSIGN_OR_RETURN(
        BufferRange dst,
        ResolveRange(*session, "[MemsetTensor] dst", request->dst().buffer(),
                     request->dst().offset(), request->size()));
    return dst.buffer->Memset(dst.offset, value, dst.size);
  });
}

grpc::ServerUnaryReactor* Service::CopyTensor(
    grpc::CallbackServerContext* context, const v1::CopyTensorRequest* request,
    v1::CopyTensorResponse* response) {
  return Offload(context, request->session(), [this, request]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions_.Find(request->session()));
    TESSERA_ASSIGN_OR_RETURN(
        BufferRange src,
        ResolveRange(*session, "[CopyTensor] src", request->src().buffer(),
                     request->src().offset(), request->size()));
    TESSERA_ASSIGN_OR_RETURN(
        BufferRange dst,
        ResolveRange(*session, "[CopyTensor] dst", request->dst().buffer(),
                     request->dst().offset(), request->size()));
    return CopyRange(src, dst, kStagingBytes);
  });
}

grpc::ServerUnaryReactor* Service::Compute(
    grpc::CallbackServerContext* context, const v1::ComputeRequest* request,
    v1::ComputeResponse* response) {
  return Offload(context, request->session(), [this, request, response]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions_.Find(request->session()));
    TESSERA_ASSIGN_OR_RETURN(std::vector<Device*> devices,
                             SelectDevices(registry_, {}));
    const absl::Time start = absl::Now();
    absl::Status status =
        RunCompute(*session, devices, limits_, *request, *response);
    metrics_.ObserveExecution(absl::Now() - start);
    return status;
  });
}

grpc::ServerUnaryReactor* Service::RegisterGraph(
    grpc::CallbackServerContext* context,
    const v1::RegisterGraphRequest* request,
    v1::RegisterGraphResponse* response) {
  return Offload(context, request->session(), [this, request, response]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions_.Find(request->session()));
    const std::vector<std::string> names(request->devices().begin(),
                                         request->devices().end());
    absl::StatusOr<std::vector<Device*>> devices =
        SelectDevices(registry_, names);
    if (!devices.ok()) {
      return absl::Status(devices.status().code(),
                          absl::StrCat("[RegisterGraph] ",
                                       devices.status().message()));
    }
    return RunRegisterGraph(*session, *devices, limits_, *request, *response);
  });
}

grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>*
Service::Execute(grpc::CallbackServerContext* context) {
  if (absl::Status s = auth_.Check(*context); !s.ok()) {
    return Refuse<
        grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>>(s);
  }
  if (execute_streams_.fetch_add(1) >= limits_.max_execute_streams) {
    execute_streams_.fetch_sub(1);
    return Refuse<
        grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>>(
        absl::ResourceExhaustedError(absl::StrCat(
            "[Execute] ", limits_.max_execute_streams,
            " Execute streams are open, the most the daemon takes "
            "(--max_execute_streams)")));
  }
  return NewExecuteReactor({.sessions = sessions_,
                            .limits = limits_,
                            .in_flight = in_flight_,
                            .work = work_,
                            .open_streams = execute_streams_});
}

grpc::ServerUnaryReactor* Service::ReleaseGraph(
    grpc::CallbackServerContext* context,
    const v1::ReleaseGraphRequest* request,
    v1::ReleaseGraphResponse* response) {
  return Offload(context, request->session(), [this, request]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions_.Find(request->session()));
    return session->ReleaseGraph(request->graph());
  });
}

}  // namespace tessera::server
