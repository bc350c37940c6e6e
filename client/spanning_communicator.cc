#include "client/spanning_communicator.h"

#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/client.h"
#include "client/remote_buffer.h"
#include "client/remote_stream.h"
#include "proto/tessera.pb.h"
#include "spdlog/spdlog.h"

namespace tessera::client {
namespace {

// `status` with "rank i (device): " before its message.
absl::Status OfRank(const absl::Status& status, int rank,
                    const RemoteDevice& device) {
  return absl::Status(status.code(),
                      absl::StrCat("rank ", rank, " (", device.name(),
                                   "): ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SpanningCommunicator>>
SpanningCommunicator::Create(absl::Span<RemoteDevice* const> members,
                             absl::Duration timeout) {
  constexpr absl::string_view kWhere = "[SpanningCommunicator::Create]";
  if (members.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, " no members"));
  }
  if (timeout < absl::Milliseconds(1) || timeout > absl::Seconds(600)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, " timeout ", absl::FormatDuration(timeout),
                     " is outside 1 ms .. 600 s"));
  }
  // One member per session: a daemon runs a session's collectives one at a
  // time, so two ranks in one session would wait for each other.
  absl::flat_hash_set<Client*> sessions;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == nullptr ||
        !sessions.insert(&members[i]->client()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhere, " member ", i,
          " is null or shares its session (Client) with another member; "
          "several devices of one daemon belong in its meta device"));
    }
  }
  const int n = static_cast<int>(members.size());
  absl::StatusOr<std::string> id = members[0]->client().NewCommGroupId();
  if (!id.ok()) return OfRank(id.status(), 0, *members[0]);

  // Every rank joins at once: each join returns when all have joined.
  std::vector<absl::StatusOr<uint64_t>> joined(
      n, absl::UnknownError("not joined"));
  std::vector<std::thread> joins;
  for (int i = 0; i < n; ++i) {
    try {
      joins.emplace_back([&, i] {
        joined[i] = members[i]->client().JoinCommGroup(
            members[i]->remote_name(), *id, n, i, timeout);
      });
    } catch (const std::system_error& e) {
      joined[i] = absl::ResourceExhaustedError(
          absl::StrCat(kWhere, " cannot start a thread: ", e.what()));
    }
  }
  for (std::thread& join : joins) join.join();
  absl::Status failed;
  std::vector<uint64_t> groups;
  for (int i = 0; i < n; ++i) {
    if (joined[i].ok()) {
      groups.push_back(*joined[i]);
    } else if (failed.ok() || absl::IsDeadlineExceeded(failed)) {
      // The first failure that is not a rank left waiting for it.
      failed = OfRank(joined[i].status(), i, *members[i]);
    }
  }
  if (!failed.ok()) {
    for (int i = 0; i < n; ++i) {
      if (joined[i].ok()) (void)members[i]->client().LeaveCommGroup(*joined[i]);
    }
    return failed;
  }
  return std::unique_ptr<SpanningCommunicator>(new SpanningCommunicator(
      std::vector<RemoteDevice*>(members.begin(), members.end()),
      std::move(groups), timeout));
}

SpanningCommunicator::~SpanningCommunicator() {
  for (size_t i = 0; i < members_.size(); ++i) {
    absl::Status s = members_[i]->client().LeaveCommGroup(groups_[i]);
    if (!s.ok()) {
      spdlog::warn("[SpanningCommunicator] leaving the group on {}: {}",
                   members_[i]->name(), s.ToString());
    }
  }
}

absl::Status SpanningCommunicator::Queue(absl::string_view where,
                                         absl::Span<Stream* const> streams,
                                         int kind,
                                         absl::Span<Tensor* const> send,
                                         absl::Span<Tensor* const> recv,
                                         uint64_t elements, int root) {
  std::vector<v1::RunCollectiveRequest> requests(size());
  std::vector<RemoteStream*> remote(size());
  for (int i = 0; i < size(); ++i) {
    remote[i] = dynamic_cast<RemoteStream*>(streams[i]);
    if (remote[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, " stream of rank ",
                                                     i, " is not a stream of ",
                                                     members_[i]->name()));
    }
    v1::RunCollectiveRequest& r = requests[i];
    r.set_group(groups_[i]);
    r.set_kind(static_cast<v1::RunCollectiveRequest::Kind>(kind));
    r.set_type(static_cast<int32_t>(send[i]->type));
    r.set_elements(elements);
    r.set_root(root);
    r.set_timeout_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(timeout_)));
    auto ref = [&](Tensor* t, v1::TensorRef* out) -> absl::Status {
      auto* buffer = dynamic_cast<RemoteBuffer*>(t->buffer);
      if (buffer == nullptr || &buffer->client() != &members_[i]->client()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " tensor of rank ", i, " (", Describe(*t),
                         ") is not in memory of ", members_[i]->name()));
      }
      TESSERA_ASSIGN_OR_RETURN(*out, buffer->RefOf(*t));
      return absl::OkStatus();
    };
    TESSERA_RETURN_IF_ERROR(ref(send[i], r.mutable_send()));
    if (!recv.empty()) TESSERA_RETURN_IF_ERROR(ref(recv[i], r.mutable_recv()));
  }
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < size(); ++i) {
    remote[i]->CollectiveAsync(std::move(requests[i]));
  }
  return absl::OkStatus();
}

absl::Status SpanningCommunicator::AllReduce(
    absl::Span<Stream* const> streams, absl::Span<Tensor* const> tensors) {
  constexpr absl::string_view kWhere = "[SpanningCommunicator::AllReduce]";
  TESSERA_RETURN_IF_ERROR(CheckAllReduceArgs(*this, streams, tensors, kWhere));
  return Queue(kWhere, streams, v1::RunCollectiveRequest::ALL_REDUCE, tensors,
               {}, tensors[0]->NumElements(), 0);
}

absl::Status SpanningCommunicator::AllGather(absl::Span<Stream* const> streams,
                                             absl::Span<Tensor* const> send,
                                             absl::Span<Tensor* const> recv) {
  constexpr absl::string_view kWhere = "[SpanningCommunicator::AllGather]";
  TESSERA_RETURN_IF_ERROR(
      CheckAllGatherArgs(*this, streams, send, recv, kWhere));
  return Queue(kWhere, streams, v1::RunCollectiveRequest::ALL_GATHER, send,
               recv, send[0]->NumElements(), 0);
}

absl::Status SpanningCommunicator::ReduceScatter(
    absl::Span<Stream* const> streams, absl::Span<Tensor* const> send,
    absl::Span<Tensor* const> recv) {
  constexpr absl::string_view kWhere = "[SpanningCommunicator::ReduceScatter]";
  TESSERA_RETURN_IF_ERROR(
      CheckReduceScatterArgs(*this, streams, send, recv, kWhere));
  return Queue(kWhere, streams, v1::RunCollectiveRequest::REDUCE_SCATTER, send,
               recv, recv[0]->NumElements(), 0);
}

absl::Status SpanningCommunicator::Broadcast(
    absl::Span<Stream* const> streams, int root,
    absl::Span<Tensor* const> tensors) {
  constexpr absl::string_view kWhere = "[SpanningCommunicator::Broadcast]";
  TESSERA_RETURN_IF_ERROR(
      CheckBroadcastArgs(*this, streams, root, tensors, kWhere));
  return Queue(kWhere, streams, v1::RunCollectiveRequest::BROADCAST, tensors,
               {}, tensors[0]->NumElements(), root);
}

}  // namespace tessera::client
