#include "client/graph_encoder.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "client/remote_buffer.h"
#include "base/status_macros.h"

namespace tessera::client {
namespace {

constexpr uint32_t kWireFlags = kFlagInput | kFlagOutput | kFlagParam;

class Encoder {
 public:
  Encoder(const Graph& graph, Client& client, bool require_data)
      : client_(client), require_data_(require_data) {
    nodes_.insert(graph.nodes().begin(), graph.nodes().end());
  }

  absl::StatusOr<EncodedGraph> Encode(const Graph& graph) {
    for (Tensor* node : graph.nodes()) {
      TESSERA_RETURN_IF_ERROR(Visit(node));
      out_.def.add_nodes(out_.ids.at(node));
    }
    for (Tensor* leaf : graph.leafs()) TESSERA_RETURN_IF_ERROR(Visit(leaf));
    return std::move(out_);
  }

 private:
  absl::Status Bad(const Tensor& t, const std::string& problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat("[EncodeGraph] tensor '", t.name, "': ", problem));
  }

  // (handle, offset) of `t`'s data if it lies in one of client_'s remote
  // buffers; nullopt when it has no data.
  absl::StatusOr<std::optional<v1::TensorRef>> DataRef(const Tensor& t) const {
    if (t.data == nullptr) {
      if (require_data_) return Bad(t, "is not allocated");
      return std::nullopt;
    }
    auto* remote = dynamic_cast<RemoteBuffer*>(t.buffer);
    if (remote == nullptr || &remote->client() != &client_) {
      return Bad(t, "its data is not in a buffer of this client's session");
    }
    TESSERA_ASSIGN_OR_RETURN(v1::TensorRef ref, remote->RefOf(t));
    return ref;
  }

  // Emits `t` after everything it reads (iteratively: graphs may be deep).
  absl::Status Visit(Tensor* root) {
    std::vector<std::pair<Tensor*, bool>> stack = {{root, false}};
    while (!stack.empty()) {
      auto [t, ready] = stack.back();
      stack.pop_back();
      if (out_.ids.contains(t)) continue;
      const bool is_node = nodes_.contains(t);
      if (!ready) {
        stack.push_back({t, true});
        if (!is_node) continue;
        if (t->view_src != nullptr) stack.push_back({t->view_src, false});
        for (Tensor* src : t->src) {
          if (src != nullptr) stack.push_back({src, false});
        }
        continue;
      }
      TESSERA_RETURN_IF_ERROR(Emit(*t, is_node));
    }
    return absl::OkStatus();
  }

  absl::Status Emit(const Tensor& t, bool is_node) {
    const uint32_t id = static_cast<uint32_t>(out_.ids.size());
    v1::TensorDef& td = *out_.def.add_tensors();
    td.set_id(id);
    td.set_type(static_cast<int32_t>(t.type));
    for (int64_t n : t.ne) td.add_ne(n);
    for (size_t n : t.nb) td.add_nb(n);
    td.set_name(t.name);
    td.set_flags(t.flags & kWireFlags);
    if (is_node) {
      td.set_op(static_cast<int32_t>(t.op));
      int n_params = kMaxOpParams;
      while (n_params > 0 && t.op_params[n_params - 1] == 0) --n_params;
      for (int i = 0; i < n_params; ++i) td.add_op_params(t.op_params[i]);
      int n_src = kMaxSrc;
      while (n_src > 0 && t.src[n_src - 1] == nullptr) --n_src;
      for (int i = 0; i < n_src; ++i) {
        td.add_src(t.src[i] == nullptr ? -1 : out_.ids.at(t.src[i]));
      }
      if (t.view_src != nullptr) {
        td.set_view_src(out_.ids.at(t.view_src));
        td.set_view_offs(t.view_offs);
      }
    }
    if (!is_node || t.view_src == nullptr) {
      TESSERA_ASSIGN_OR_RETURN(std::optional<v1::TensorRef> ref, DataRef(t));
      if (ref.has_value()) {
        *td.mutable_data() = *ref;
      } else if (!is_node && t.view_src != nullptr) {
        return Bad(t, "a view that is not a node of the graph needs data");
      }
    }
    out_.ids.emplace(&t, id);
    return absl::OkStatus();
  }

  Client& client_;
  const bool require_data_;
  absl::flat_hash_set<const Tensor*> nodes_;
  EncodedGraph out_;
};

}  // namespace

absl::StatusOr<uint32_t> EncodedGraph::IdOf(const Tensor* t) const {
  auto it = ids.find(t);
  if (it == ids.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t->name, "' is not in the graph"));
  }
  return it->second;
}

absl::Status EncodedGraph::AddInputs(
    absl::Span<const TensorInput> inputs,
    google::protobuf::RepeatedPtrField<v1::TensorData>& out) const {
  for (const TensorInput& in : inputs) {
    TESSERA_ASSIGN_OR_RETURN(uint32_t id, IdOf(in.tensor));
    v1::TensorData* data = out.Add();
    data->set_id(id);
    data->set_data(in.data, in.size);
  }
  return absl::OkStatus();
}

absl::Status CopyOutputs(
    const google::protobuf::RepeatedPtrField<v1::TensorData>& results,
    absl::Span<const TensorOutput> outputs) {
  if (static_cast<size_t>(results.size()) != outputs.size()) {
    return absl::DataLossError(absl::StrCat(
        "got ", results.size(), " outputs, asked for ", outputs.size()));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& data = results[i].data();
    if (data.size() != outputs[i].size) {
      return absl::DataLossError(absl::StrCat(
          "output '", outputs[i].tensor->name, "' has ", data.size(),
          " bytes, expected ", outputs[i].size));
    }
    std::copy(data.begin(), data.end(), static_cast<char*>(outputs[i].data));
  }
  return absl::OkStatus();
}

absl::StatusOr<EncodedGraph> EncodeGraph(const Graph& graph, Client& client,
                                         bool require_data) {
  return Encoder(graph, client, require_data).Encode(graph);
}

}  // namespace tessera::client
