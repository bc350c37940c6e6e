// The Service's collective-group RPCs (NewCommGroupId, JoinCommGroup,
// LeaveCommGroup, RunCollective): one rank of a group spanning daemons.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/assembly/comm_group.h"
#include "base/status_macros.h"
#include "graph/type.h"
#include "server/decoding/buffer_range.h"
#include "server/rpc/service.h"

namespace tessera::server {
namespace {

// Groups one session may hold at once.
constexpr size_t kMaxCommGroups = 8;
// Ranks of one group.
constexpr int kMaxCommRanks = 1024;
// Ids this daemon made that no group joined here yet: each holds an NCCL
// bootstrap thread and socket until its group forms.
constexpr size_t kMaxPendingCommIds = 64;
// The wait for other ranks when a request gives none, and the longest.
constexpr uint32_t kDefaultCommTimeoutMs = 60'000;
constexpr uint32_t kMaxCommTimeoutMs = 600'000;

absl::StatusOr<absl::Duration> CommTimeout(absl::string_view where,
                                           uint32_t ms) {
  if (ms > kMaxCommTimeoutMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " timeout_ms: ", ms, " is over ", kMaxCommTimeoutMs));
  }
  return absl::Milliseconds(ms == 0 ? kDefaultCommTimeoutMs : ms);
}

// A 1-D tensor of `elements` values of `type` at `ref` in `session`'s
// buffers, which must be memory of `device`.
absl::StatusOr<std::pair<Tensor, std::shared_ptr<Buffer>>> CollectiveTensor(
    const Session& session, absl::string_view what, const v1::TensorRef& ref,
    Type type, uint64_t elements, Device& device) {
  if (elements == 0 || elements % Traits(type).block_size != 0 ||
      elements > (uint64_t{1} << 62) / Traits(type).type_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", elements, " values of ", std::string(TypeName(type)),
        " are not a whole number of blocks (or too many)"));
  }
  const size_t bytes = RowSize(type, static_cast<int64_t>(elements));
  TESSERA_ASSIGN_OR_RETURN(
      BufferRange range,
      ResolveRange(session, what, ref.buffer(), ref.offset(), bytes));
  if (&range.buffer->type().device() != &device) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": buffer ", ref.buffer(), " is not memory of ",
                     device.name(), ", the group's device"));
  }
  Tensor t;
  t.type = type;
  t.ne[0] = static_cast<int64_t>(elements);
  ContiguousStrides(t.type, t.ne, t.nb);
  t.buffer = range.buffer.get();
  t.data = static_cast<char*>(range.buffer->base()) + range.offset;
  return std::make_pair(t, std::move(range.buffer));
}

// Counts one call waiting for other ranks in `waits` while it lives.
class CommWait {
 public:
  // Errors: RESOURCE_EXHAUSTED when `limit` calls wait already.
  static absl::StatusOr<std::unique_ptr<CommWait>> Begin(
      std::atomic<int>& waits, int limit, absl::string_view where) {
    if (waits.fetch_add(1) >= limit) {
      waits.fetch_sub(1);
      return absl::ResourceExhaustedError(absl::StrCat(
          where, " ", limit,
          " calls already wait for other ranks of collective groups"));
    }
    return std::unique_ptr<CommWait>(new CommWait(waits));
  }
  ~CommWait() { waits_.fetch_sub(1); }

 private:
  explicit CommWait(std::atomic<int>& waits) : waits_(waits) {}
  std::atomic<int>& waits_;
};

}  // namespace

grpc::ServerUnaryReactor* Service::NewCommGroupId(
    grpc::CallbackServerContext* context,
    const v1::NewCommGroupIdRequest* request,
    v1::NewCommGroupIdResponse* response) {
  return Offload(
      context, request->session(), [this, request, response]() -> absl::Status {
        TESSERA_RETURN_IF_ERROR(sessions_.Find(request->session()).status());
        absl::MutexLock lock(&comm_ids_mu_);
        if (pending_comm_ids_.size() >= kMaxPendingCommIds) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "[NewCommGroupId] ", kMaxPendingCommIds,
              " group ids made here wait for their groups to form"));
        }
        TESSERA_ASSIGN_OR_RETURN(std::string id,
                                 tessera::NewCommGroupId(registry_));
        pending_comm_ids_.insert(id);
        response->set_id(std::move(id));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* Service::JoinCommGroup(
    grpc::CallbackServerContext* context,
    const v1::JoinCommGroupRequest* request,
    v1::JoinCommGroupResponse* response) {
  return Offload(
      context, request->session(), [this, request, response]() -> absl::Status {
        constexpr absl::string_view kWhere = "[JoinCommGroup]";
        TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                                 sessions_.Find(request->session()));
        if (session->num_comm_groups() >= kMaxCommGroups) {
          return absl::ResourceExhaustedError(
              absl::StrCat(kWhere, " the session holds ", kMaxCommGroups,
                           " groups, the most it may"));
        }
        absl::StatusOr<Device*> device = registry_.Find(request->device());
        if (!device.ok()) {
          return absl::NotFoundError(absl::StrCat(
              kWhere, " device: no device named \"", request->device(), "\""));
        }
        TESSERA_ASSIGN_OR_RETURN(absl::Duration timeout,
                                 CommTimeout(kWhere, request->timeout_ms()));
        if (request->ranks() > kMaxCommRanks) {
          return absl::InvalidArgumentError(
              absl::StrCat(kWhere, " ranks: ", request->ranks(), " is over ",
                           kMaxCommRanks));
        }
        TESSERA_ASSIGN_OR_RETURN(
            std::unique_ptr<CommWait> wait,
            CommWait::Begin(comm_waits_, max_comm_waits_, kWhere));
        TESSERA_ASSIGN_OR_RETURN(
            std::unique_ptr<Communicator> group,
            tessera::JoinCommGroup(**device, request->id(), request->ranks(),
                                   request->rank(), timeout));
        {
          absl::MutexLock lock(&comm_ids_mu_);
          pending_comm_ids_.erase(request->id());
        }
        TESSERA_ASSIGN_OR_RETURN(
            uint64_t handle,
            session->AddCommGroup(std::move(group), kMaxCommGroups));
        response->set_group(handle);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* Service::LeaveCommGroup(
    grpc::CallbackServerContext* context,
    const v1::LeaveCommGroupRequest* request,
    v1::LeaveCommGroupResponse* response) {
  return Offload(context, request->session(),
                 [this, request]() -> absl::Status {
                   TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                                            sessions_.Find(request->session()));
                   return session->LeaveCommGroup(request->group());
                 });
}

grpc::ServerUnaryReactor* Service::RunCollective(
    grpc::CallbackServerContext* context,
    const v1::RunCollectiveRequest* request,
    v1::RunCollectiveResponse* response) {
  return Offload(
      context, request->session(), [this, request]() -> absl::Status {
        constexpr absl::string_view kWhere = "[RunCollective]";
        TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                                 sessions_.Find(request->session()));
        TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Communicator> group,
                                 session->FindCommGroup(request->group()));
        TESSERA_ASSIGN_OR_RETURN(absl::Duration timeout,
                                 CommTimeout(kWhere, request->timeout_ms()));
        if (!IsValidType(request->type())) {
          return absl::InvalidArgumentError(
              absl::StrCat(kWhere, " type: ", request->type(), " is no type"));
        }
        const Type type = static_cast<Type>(request->type());
        const uint64_t n = request->elements();
        const uint64_t ranks = static_cast<uint64_t>(group->ranks());
        Device& device = group->device(0);
        const v1::RunCollectiveRequest::Kind kind = request->kind();
        const bool two = kind == v1::RunCollectiveRequest::ALL_GATHER ||
                         kind == v1::RunCollectiveRequest::REDUCE_SCATTER;
        if (n > (uint64_t{1} << 56) / ranks) {
          return absl::InvalidArgumentError(
              absl::StrCat(kWhere, " elements: ", n, " is too many"));
        }
        const uint64_t send_n =
            kind == v1::RunCollectiveRequest::REDUCE_SCATTER ? n * ranks : n;
        const uint64_t recv_n =
            kind == v1::RunCollectiveRequest::ALL_GATHER ? n * ranks : n;
        TESSERA_ASSIGN_OR_RETURN(
            auto send, CollectiveTensor(*session, "[RunCollective] send",
                                        request->send(), type, send_n, device));
        std::pair<Tensor, std::shared_ptr<Buffer>> recv;
        if (two) {
          TESSERA_ASSIGN_OR_RETURN(
              recv, CollectiveTensor(*session, "[RunCollective] recv",
                                     request->recv(), type, recv_n, device));
        }
        Tensor* s = &send.first;
        Tensor* r = &recv.first;

        TESSERA_ASSIGN_OR_RETURN(
            std::unique_ptr<CommWait> wait,
            CommWait::Begin(comm_waits_, max_comm_waits_, kWhere));
        absl::MutexLock lock(&session->compute_mutex());
        TESSERA_ASSIGN_OR_RETURN(Stream * stream,
                                 session->ComputeStream(device));
        Stream* const streams[] = {stream};
        absl::Status status;
        switch (kind) {
          case v1::RunCollectiveRequest::ALL_REDUCE:
            status = group->AllReduce(streams, {s});
            break;
          case v1::RunCollectiveRequest::ALL_GATHER:
            status = group->AllGather(streams, {s}, {r});
            break;
          case v1::RunCollectiveRequest::REDUCE_SCATTER:
            status = group->ReduceScatter(streams, {s}, {r});
            break;
          case v1::RunCollectiveRequest::BROADCAST:
            status = group->Broadcast(streams, request->root(), {s});
            break;
          default:
            return absl::InvalidArgumentError(
                absl::StrCat(kWhere, " kind: ", static_cast<int>(kind),
                             " is no collective"));
        }
        if (status.ok()) status = group->Await(streams, timeout);
        // A failed stream keeps its error; the next call gets a fresh one.
        if (!status.ok()) session->ResetComputeStreams();
        return status;
      });
}

}  // namespace tessera::server
