#include "client/remote_graph.h"

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
  absl::MutexLock lock(&write_mu_);
  request.set_tag(next_tag_);
  const size_t bytes = request.ByteSizeLong();
  if (held_ > 0 && held_bytes_ + bytes > kMaxHeldBytes) {
    TESSERA_RETURN_IF_ERROR(FlushLocked());
  }
  // Whether an earlier execution is unanswered.
  const bool busy = next_tag_ > next_result_.load(std::memory_order_acquire);
  ++next_tag_;
  if (held_ == 0) {
    held_message_ = std::move(request);
  } else {
    *held_message_.add_more() = std::move(request);
  }
  ++held_;
  held_bytes_ += bytes;
  if (batches_ && busy && held_ < kMaxExecutionsPerMessage &&
      held_bytes_ <= kMaxHeldBytes) {
    return absl::OkStatus();
  }
  return FlushLocked();
}

absl::Status RemoteGraph::Flush() {
  absl::MutexLock lock(&write_mu_);
  return FlushLocked();
}

absl::Status RemoteGraph::FlushLocked() {
  if (held_ == 0) return absl::OkStatus();
  if (batches_) {
    held_message_.set_max_responses_per_message(kMaxExecutionsPerMessage);
  }
  const bool written = stream_->Write(held_message_);
  held_message_.Clear();
  held_ = 0;
  held_bytes_ = 0;
  if (!written) {
    return absl::UnavailableError(absl::StrCat(
        "[RemoteGraph] the execute stream of graph ", handle_, " is closed"));
  }
  return absl::OkStatus();
}

absl::Status RemoteGraph::Receive(absl::Span<const TensorOutput> outputs) {
  if (received_.empty()) {
    if (ended()) return Ended(End());
    {
      absl::MutexLock lock(&write_mu_);
      const uint64_t sent_unanswered =
          next_tag_ - held_ - next_result_.load(std::memory_order_acquire);
      // A failed write shows as the end of the stream below.
      if (held_ >= sent_unanswered) (void)FlushLocked();
    }
    v1::ExecuteResponse message;
    if (!stream_->Read(&message)) return Ended(End());
    google::protobuf::RepeatedPtrField<v1::ExecuteResponse> more;
    more.Swap(message.mutable_more());
    received_.push_back(std::move(message));
    for (v1::ExecuteResponse& response : more) {
      received_.push_back(std::move(response));
    }
  }
  const v1::ExecuteResponse response = std::move(received_.front());
  received_.pop_front();
  const uint64_t expected = next_result_.load(std::memory_order_acquire);
  if (response.tag() != expected) {
    return absl::DataLossError(absl::StrCat(
        "[RemoteGraph] result ", response.tag(), " came, expected ", expected));
  }
  next_result_.fetch_add(1, std::memory_order_release);
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
