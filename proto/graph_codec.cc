#include "proto/graph_codec.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "proto/split_state_codec.h"

namespace tessera::wire {
namespace {

constexpr uint32_t kWireFlags = kFlagInput | kFlagOutput | kFlagParam;

class Encoder {
 public:
  Encoder(const Graph& graph, const DataRefFn& data_ref,
          const SplitFn& split_of)
      : data_ref_(data_ref), split_of_(split_of) {
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
      TESSERA_ASSIGN_OR_RETURN(std::optional<v1::TensorRef> ref, data_ref_(t));
      if (ref.has_value()) {
        *td.mutable_data() = *ref;
        if (split_of_) {
          TESSERA_ASSIGN_OR_RETURN(std::optional<SplitState> split,
                                   split_of_(t));
          if (split.has_value()) *td.mutable_split() = ToProto(*split);
        }
      } else if (!is_node && t.view_src != nullptr) {
        return EncodeError(t,
                           "a view that is not a node of the graph needs data");
      }
    }
    out_.ids.emplace(&t, id);
    return absl::OkStatus();
  }

  const DataRefFn& data_ref_;
  const SplitFn& split_of_;
  absl::flat_hash_set<const Tensor*> nodes_;
  EncodedGraph out_;
};

// "tensor 7 (\"name\")" for messages.
std::string Label(uint32_t id, absl::string_view name) {
  if (name.empty()) return absl::StrCat("tensor ", id);
  return absl::StrCat("tensor ", id, " (\"", name, "\")");
}

absl::Status Invalid(uint32_t id, absl::string_view name,
                     absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("[DecodeGraph] ", Label(id, name), ": ", problem));
}

// A hook's error with the tensor named.
absl::Status HookError(uint32_t id, absl::string_view name,
                       const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("[DecodeGraph] ", Label(id, name), ": ",
                                   status.message()));
}

class Decoder {
 public:
  Decoder(const GraphLimits& limits, const GraphHooks& hooks, Context& ctx)
      : limits_(limits), hooks_(hooks), ctx_(ctx) {}

  absl::Status Tensors(const v1::GraphDef& def) {
    if (def.tensors_size() > static_cast<int>(limits_.max_tensors)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("[DecodeGraph] ", def.tensors_size(),
                       " tensors exceed the server's max_graph_nodes ",
                       limits_.max_tensors));
    }
    order_.reserve(def.tensors_size());
    for (const v1::TensorDef& td : def.tensors()) {
      TESSERA_RETURN_IF_ERROR(OneTensor(td));
    }
    return absl::OkStatus();
  }

  absl::Status Nodes(const v1::GraphDef& def) {
    std::vector<Tensor*> nodes;
    if (def.nodes_size() == 0) {
      for (Tensor* t : order_) {
        if (t->op != Op::kNone) nodes.push_back(t);
      }
    } else {
      if (def.nodes_size() > static_cast<int>(limits_.max_tensors)) {
        return absl::ResourceExhaustedError(
            absl::StrCat("[DecodeGraph] ", def.nodes_size(),
                         " nodes exceed the server's max_graph_nodes ",
                         limits_.max_tensors));
      }
      absl::flat_hash_set<uint32_t> listed;
      for (int i = 0; i < def.nodes_size(); ++i) {
        const uint32_t id = def.nodes(i);
        auto it = out_.by_id.find(id);
        if (it == out_.by_id.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "[DecodeGraph] nodes[", i, "]: no tensor with id ", id));
        }
        if (it->second->op == Op::kNone) {
          return Invalid(id, it->second->name,
                         absl::StrCat("listed in nodes[", i,
                                      "] but has no op (a leaf)"));
        }
        if (!listed.insert(id).second) {
          return Invalid(
              id, it->second->name,
              absl::StrCat("listed twice in nodes (again at [", i, "])"));
        }
        nodes.push_back(it->second);
      }
    }
    out_.graph = std::make_unique<Graph>(limits_.max_tensors);
    absl::flat_hash_set<const Tensor*> computed;
    absl::flat_hash_set<const Tensor*> leafs;
    for (Tensor* node : nodes) {
      for (Tensor* src : node->src) {
        if (src != nullptr) {
          TESSERA_RETURN_IF_ERROR(Use(node, src, computed, leafs));
        }
      }
      if (node->view_src != nullptr) {
        TESSERA_RETURN_IF_ERROR(Use(node, node->view_src, computed, leafs));
      }
      computed.insert(node);
      out_.graph->AddNode(node);
    }
    for (Tensor* leaf : out_.graph->leafs()) {
      if (leaf->HasFlag(kFlagInput)) out_.inputs.push_back(leaf);
    }
    out_.members.insert(out_.graph->nodes().begin(),
                        out_.graph->nodes().end());
    out_.members.insert(out_.graph->leafs().begin(),
                        out_.graph->leafs().end());
    if (out_.graph->nodes().size() + out_.graph->leafs().size() >
        limits_.max_tensors) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "[DecodeGraph] the graph's nodes and leafs exceed the server's "
          "max_graph_nodes ",
          limits_.max_tensors));
    }
    return absl::OkStatus();
  }

  DecodedGraphDef Take() { return std::move(out_); }

 private:
  // `node` reads `src`: a leaf (added to the graph's leafs once, after the
  // root it views) or a node listed before `node`.
  absl::Status Use(const Tensor* node, Tensor* src,
                   const absl::flat_hash_set<const Tensor*>& computed,
                   absl::flat_hash_set<const Tensor*>& leafs) {
    if (src->op != Op::kNone) {
      if (computed.contains(src)) return absl::OkStatus();
      return Invalid(ids_.at(node), node->name,
                     absl::StrCat("its source ", Label(ids_.at(src), src->name),
                                  " is not a node listed before it"));
    }
    if (src->view_src != nullptr && !leafs.contains(src->view_src)) {
      TESSERA_RETURN_IF_ERROR(Use(node, src->view_src, computed, leafs));
    }
    if (leafs.insert(src).second) out_.graph->AddLeaf(src);
    return absl::OkStatus();
  }

  // An earlier tensor by wire id, for source slot `what`.
  absl::StatusOr<Tensor*> Earlier(uint32_t id, absl::string_view name,
                                  int64_t ref, absl::string_view what) {
    auto it = ref >= 0 && ref <= std::numeric_limits<uint32_t>::max()
                  ? out_.by_id.find(static_cast<uint32_t>(ref))
                  : out_.by_id.end();
    if (it == out_.by_id.end()) {
      return Invalid(
          id, name,
          absl::StrCat(what, " ", ref, " is not a tensor defined before it"));
    }
    return it->second;
  }

  absl::Status OneTensor(const v1::TensorDef& td) {
    const uint32_t id = td.id();
    if (td.name().size() > limits_.max_name_bytes) {
      return Invalid(id, "",
                     absl::StrCat("name of ", td.name().size(),
                                  " bytes exceeds ", limits_.max_name_bytes));
    }
    const std::string& name = td.name();
    if (out_.by_id.contains(id)) return Invalid(id, name, "duplicate id");
    if (!IsValidType(td.type())) {
      return Invalid(id, name, absl::StrCat("unknown type ", td.type()));
    }
    if (td.ne_size() < 1 || td.ne_size() > kMaxDims) {
      return Invalid(
          id, name,
          absl::StrCat(td.ne_size(), " dimensions, want 1 to ", kMaxDims));
    }
    absl::StatusOr<Tensor*> made =
        ctx_.NewTensor(static_cast<Type>(td.type()),
                       absl::MakeConstSpan(td.ne().data(), td.ne_size()));
    if (!made.ok()) return Invalid(id, name, made.status().message());
    Tensor& t = **made;
    t.name = name;

    if (td.nb_size() != 0) {
      if (td.nb_size() != kMaxDims) {
        return Invalid(id, name,
                       absl::StrCat(td.nb_size(), " strides, want ", kMaxDims,
                                    " or none (contiguous)"));
      }
      for (int i = 0; i < kMaxDims; ++i) t.nb[i] = td.nb(i);
      // Permuted views may stride their first dimension; ValidateNode
      // re-derives their strides.
      if (!td.has_view_src() && t.nb[0] != Traits(t.type).type_size) {
        return Invalid(id, name,
                       absl::StrCat("nb[0] = ", t.nb[0], ", want ",
                                    Traits(t.type).type_size, " for ",
                                    std::string(TypeName(t.type))));
      }
    }
    const std::optional<size_t> bytes = CheckedNumBytes(t);
    if (!bytes.has_value()) {
      return Invalid(id, name, "its byte span overflows");
    }

    if (td.op() < 0 || td.op() >= kOpCount) {
      return Invalid(id, name, absl::StrCat("unknown op ", td.op()));
    }
    t.op = static_cast<Op>(td.op());
    if (td.op_params_size() > kMaxOpParams) {
      return Invalid(id, name,
                     absl::StrCat(td.op_params_size(), " op_params, at most ",
                                  kMaxOpParams));
    }
    std::copy(td.op_params().begin(), td.op_params().end(), t.op_params);
    if (td.src_size() > kMaxSrc) {
      return Invalid(
          id, name, absl::StrCat(td.src_size(), " sources, at most ", kMaxSrc));
    }
    for (int i = 0; i < td.src_size(); ++i) {
      if (td.src(i) == -1) continue;
      TESSERA_ASSIGN_OR_RETURN(
          t.src[i], Earlier(id, name, td.src(i), absl::StrCat("src[", i, "]")));
    }
    if (td.has_view_src()) {
      TESSERA_ASSIGN_OR_RETURN(t.view_src,
                               Earlier(id, name, td.view_src(), "view_src"));
      t.view_offs = td.view_offs();
    } else if (td.view_offs() != 0) {
      return Invalid(id, name, "view_offs without view_src");
    }
    if ((td.flags() & ~kWireFlags) != 0) {
      return Invalid(id, name, absl::StrCat("unknown flags ", td.flags()));
    }
    t.flags = td.flags() & ~static_cast<uint32_t>(kFlagInput);

    if (td.has_data()) {
      if (t.IsView()) {
        return Invalid(id, name,
                       "a view may not have data (it takes its source's)");
      }
      if (!hooks_.place_data) {
        return Invalid(id, name, "data is not accepted here");
      }
      if (absl::Status s = hooks_.place_data(t, td.data(), *bytes); !s.ok()) {
        return HookError(id, name, s);
      }
    } else if (t.op == Op::kNone && !t.IsView()) {
      t.flags |= kFlagInput;
    }
    if (td.has_split()) {
      if (!td.has_data()) {
        return Invalid(id, name, "a split state without data");
      }
      if (!hooks_.place_split) {
        return Invalid(id, name, "a split state is not accepted here");
      }
      absl::StatusOr<SplitState> split = FromProto(td.split());
      if (!split.ok()) return Invalid(id, name, split.status().message());
      if (absl::Status s = hooks_.place_split(t, *split); !s.ok()) {
        return HookError(id, name, s);
      }
    }

    if (hooks_.validate) {
      if (absl::Status s = hooks_.validate(t); !s.ok()) {
        return HookError(id, name, s);
      }
    }
    out_.by_id.emplace(id, &t);
    ids_.emplace(&t, id);
    order_.push_back(&t);
    return absl::OkStatus();
  }

  const GraphLimits& limits_;
  const GraphHooks& hooks_;
  Context& ctx_;
  DecodedGraphDef out_;
  absl::flat_hash_map<const Tensor*, uint32_t> ids_;
  std::vector<Tensor*> order_;
};

}  // namespace

absl::Status EncodeError(const Tensor& t, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("[EncodeGraph] tensor '", t.name, "': ", problem));
}

absl::StatusOr<uint32_t> EncodedGraph::IdOf(const Tensor* t) const {
  auto it = ids.find(t);
  if (it == ids.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t->name, "' is not in the graph"));
  }
  return it->second;
}

absl::StatusOr<EncodedGraph> ToProto(const Graph& graph,
                                     const DataRefFn& data_ref,
                                     const SplitFn& split_of) {
  return Encoder(graph, data_ref, split_of).Encode(graph);
}

absl::StatusOr<DecodedGraphDef> FromProto(const v1::GraphDef& def,
                                          const GraphLimits& limits,
                                          const GraphHooks& hooks,
                                          Context& ctx) {
  Decoder decoder(limits, hooks, ctx);
  TESSERA_RETURN_IF_ERROR(decoder.Tensors(def));
  TESSERA_RETURN_IF_ERROR(decoder.Nodes(def));
  return decoder.Take();
}

}  // namespace tessera::wire
