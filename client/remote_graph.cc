#include "client/remote_graph.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "proto/value_codec.h"
#include "spdlog/spdlog.h"

namespace tessera::client {

absl::StatusOr<std::unique_ptr<RemoteGraph>> RemoteGraph::Register(
    Client& client, const Graph& graph, const Options& options) {
  TESSERA_ASSIGN_OR_RETURN(EncodedGraph encoded,
                           EncodeGraph(graph, client, /*require_data=*/false));
  TESSERA_ASSIGN_OR_RETURN(
      RegisteredGraphInfo info,
      client.RegisterGraph(encoded.def, options.n_copies, options.devices));
  std::unique_ptr<RemoteGraph> g(new RemoteGraph(client, std::move(encoded)));
  g->handle_ = info.handle;
  g->n_splits_ = info.n_splits;
  g->compute_bytes_ = std::move(info.compute_bytes);
  g->stream_ = client.OpenExecuteStream(g->context_);
  return g;
}

RemoteGraph::RemoteGraph(Client& client, EncodedGraph encoded)
    : client_(client),
      encoded_(std::move(encoded)),
      max_held_(client.version() < 2 ? 1
                : client.limits().max_queued_executions() == 0
                    ? kMaxExecutionsPerMessage
                    : std::clamp<uint32_t>(
                          client.limits().max_queued_executions() / 2, 1,
                          kMaxExecutionsPerMessage)),
      max_held_bytes_(client.limits().max_message_bytes() / 4) {}

RemoteGraph::~RemoteGraph() {
  if (!ended()) {
    (void)Flush();
    stream_->WritesDone();
    v1::ExecuteResponse response;
    while (stream_->Read(&response)) {
    }
  }
  if (absl::Status s = End(); !s.ok()) {
    spdlog::warn("execute stream of graph {}: {}", handle_, s.ToString());
  }
  if (absl::Status s = client_.ReleaseGraph(handle_); !s.ok()) {
    spdlog::warn("releasing graph {}: {}", handle_, s.ToString());
  }
}

bool RemoteGraph::ended() {
  absl::MutexLock lock(&end_mu_);
  return end_.has_value();
}

absl::Status RemoteGraph::End() {
  absl::MutexLock lock(&end_mu_);
  if (!end_.has_value()) end_ = FromGrpc(stream_->Finish());
  return *end_;
}

absl::Status RemoteGraph::Ended(const absl::Status& end) const {
  return absl::UnavailableError(
      absl::StrCat("[RemoteGraph] the execute stream of graph ", handle_,
                   " ended: ", end.ToString()));
}

absl::Status RemoteGraph::Submit(absl::Span<const TensorInput> inputs,
                                 absl::Span<const Tensor* const> outputs) {
  v1::ExecuteRequest request;
  request.set_session(client_.session());
  request.set_graph(handle_);
  TESSERA_RETURN_IF_ERROR(
      wire::ToProto(inputs, encoded_, *request.mutable_inputs()));
  for (const Tensor* out : outputs) {
    TESSERA_ASSIGN_OR_RETURN(uint32_t id, encoded_.IdOf(out));
    request.add_outputs(id);
  }
  if (ended()) return Ended(End());
  const size_t bytes = request.ByteSizeLong();
  absl::MutexLock lock(&mu_);
  auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return held_ == 0 ||
           (held_ < max_held_ && held_bytes_ + bytes <= max_held_bytes_);
  };
  // Held executions that this one would overfill go first, once no other
  // thread is writing.
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return fits() || !writing_;
  };
  mu_.Await(absl::Condition(&ready));
  if (!fits()) {
    send_held_ = true;
    TESSERA_RETURN_IF_ERROR(SendHeldLocked());
  }
  // An earlier execution is sent and unanswered: the daemon is at work.
  const bool busy = Unanswered() > 0;
  request.set_tag(next_tag_++);
  if (held_ == 0) {
    held_message_ = std::move(request);
  } else {
    *held_message_.add_more() = std::move(request);
  }
  ++held_;
  held_bytes_ += bytes;
  if (!busy || held_ >= max_held_) send_held_ = true;
  return SendHeldLocked();
}

absl::Status RemoteGraph::Flush() {
  absl::MutexLock lock(&mu_);
  if (held_ > 0) send_held_ = true;
  return SendHeldLocked();
}

uint64_t RemoteGraph::Unanswered() const {
  const uint64_t sent = next_tag_ - held_;
  return sent > answered_ ? sent - answered_ : 0;
}

absl::Status RemoteGraph::SendHeldLocked() {
  absl::Status status;
  while (send_held_ && held_ > 0 && !writing_) {
    v1::ExecuteRequest message = std::move(held_message_);
    held_message_.Clear();
    held_ = 0;
    held_bytes_ = 0;
    send_held_ = false;
    writing_ = true;
    if (max_held_ > 1) message.set_max_responses_per_message(max_held_);
    mu_.Unlock();
    const bool written = stream_->Write(message);
    mu_.Lock();
    writing_ = false;
    if (!written) {
      status = absl::UnavailableError(absl::StrCat(
          "[RemoteGraph] the execute stream of graph ", handle_, " is closed"));
      break;
    }
  }
  return status;
}

absl::Status RemoteGraph::Receive(absl::Span<const TensorOutput> outputs) {
  if (received_.empty()) {
    if (ended()) return Ended(End());
    {
      absl::MutexLock lock(&mu_);
      if (held_ > 0 && held_ >= Unanswered()) send_held_ = true;
      // A failed write shows as the end of the stream below.
      (void)SendHeldLocked();
    }
    v1::ExecuteResponse message;
    if (!stream_->Read(&message)) return Ended(End());
    google::protobuf::RepeatedPtrField<v1::ExecuteResponse> more;
    more.Swap(message.mutable_more());
    received_.push_back(std::move(message));
    for (v1::ExecuteResponse& response : more) {
      received_.push_back(std::move(response));
    }
    absl::MutexLock lock(&mu_);
    answered_ += 1 + more.size();
  }
  const v1::ExecuteResponse response = std::move(received_.front());
  received_.pop_front();
  if (response.tag() != next_result_) {
    return absl::DataLossError(absl::StrCat("[RemoteGraph] result ",
                                            response.tag(), " came, expected ",
                                            next_result_));
  }
  ++next_result_;
  TESSERA_RETURN_IF_ERROR(wire::GetStatus(response));
  return wire::FromProto(response.outputs(), outputs);
}

absl::Status RemoteGraph::Run(absl::Span<const TensorInput> inputs,
                              absl::Span<const TensorOutput> outputs) {
  std::vector<const Tensor*> wanted;
  for (const TensorOutput& out : outputs) wanted.push_back(out.tensor);
  TESSERA_RETURN_IF_ERROR(Submit(inputs, wanted));
  return Receive(outputs);
}

}  // namespace tessera::client
