#include "client/remote_graph.h"

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
  request.set_tag(next_tag_);
  TESSERA_RETURN_IF_ERROR(
      wire::ToProto(inputs, encoded_, *request.mutable_inputs()));
  for (const Tensor* out : outputs) {
    TESSERA_ASSIGN_OR_RETURN(uint32_t id, encoded_.IdOf(out));
    request.add_outputs(id);
  }
  if (ended()) return Ended(End());
  if (!stream_->Write(request)) {
    return absl::UnavailableError(
        absl::StrCat("[RemoteGraph] the execute stream of graph ", handle_,
                     " is closed"));
  }
  ++next_tag_;
  return absl::OkStatus();
}

absl::Status RemoteGraph::Receive(absl::Span<const TensorOutput> outputs) {
  if (ended()) return Ended(End());
  v1::ExecuteResponse response;
  if (!stream_->Read(&response)) return Ended(End());
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
