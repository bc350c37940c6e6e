#include "server/decoding/graph_decoder.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/ops.h"
#include "base/status_macros.h"

namespace tessera::server {
namespace {

constexpr uint32_t kKnownFlags = kFlagInput | kFlagOutput | kFlagParam;

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

// Tensor::NumBytes of `t` computed without overflow: false when the span
// does not fit in int64_t.
bool SpanBytes(const Tensor& t, uint64_t* bytes) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] <= 0) {
      *bytes = 0;
      return true;
    }
  }
  const TypeTraits& traits = Traits(t.type);
  uint64_t total;
  int first = 0;
  if (traits.block_size == 1) {
    total = traits.type_size;
  } else {
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[0]) /
                                   traits.block_size,
                               static_cast<uint64_t>(t.nb[0]), &total)) {
      return false;
    }
    first = 1;
  }
  for (int i = first; i < kMaxDims; ++i) {
    uint64_t span;
    if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[i] - 1),
                               static_cast<uint64_t>(t.nb[i]), &span) ||
        __builtin_add_overflow(total, span, &total)) {
      return false;
    }
  }
  *bytes = total;
  return total <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

class Decoder {
 public:
  Decoder(const BufferResolver& resolve, const DecodeLimits& limits,
          DecodedGraph& out)
      : resolve_(resolve), limits_(limits), out_(out) {}

  absl::Status Tensors(const v1::GraphDef& def) {
    if (def.tensors_size() > static_cast<int>(limits_.max_tensors)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "[DecodeGraph] ", def.tensors_size(),
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
        return absl::ResourceExhaustedError(absl::StrCat(
            "[DecodeGraph] ", def.nodes_size(),
            " nodes exceed the server's max_graph_nodes ", limits_.max_tensors));
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
          return Invalid(id, it->second->name,
                         absl::StrCat("listed twice in nodes (again at [", i,
                                      "])"));
        }
        nodes.push_back(it->second);
      }
    }
    out_.graph = std::make_unique<Graph>(limits_.max_tensors);
    absl::flat_hash_set<const Tensor*> computed;
    absl::flat_hash_set<const Tensor*> leafs;
    for (Tensor* node : nodes) {
      for (Tensor* src : node->src) {
        if (src != nullptr) TESSERA_RETURN_IF_ERROR(Use(node, src, computed, leafs));
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
    out_.members.insert(out_.graph->nodes().begin(), out_.graph->nodes().end());
    out_.members.insert(out_.graph->leafs().begin(), out_.graph->leafs().end());
    if (out_.graph->nodes().size() + out_.graph->leafs().size() >
        limits_.max_tensors) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "[DecodeGraph] the graph's nodes and leafs exceed the server's "
          "max_graph_nodes ",
          limits_.max_tensors));
    }
    return absl::OkStatus();
  }

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
      return Invalid(id, name,
                     absl::StrCat(what, " ", ref,
                                  " is not a tensor defined before it"));
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
      return Invalid(id, name,
                     absl::StrCat(td.ne_size(), " dimensions, want 1 to ",
                                  kMaxDims));
    }
    absl::StatusOr<Tensor*> made = out_.ctx->NewTensor(
        static_cast<Type>(td.type()),
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
      if (!td.has_view_src() &&
          t.nb[0] != Traits(t.type).type_size) {
        return Invalid(id, name,
                       absl::StrCat("nb[0] = ", t.nb[0], ", want ",
                                    Traits(t.type).type_size, " for ",
                                    std::string(TypeName(t.type))));
      }
    }
    uint64_t bytes = 0;
    if (!SpanBytes(t, &bytes)) {
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
      return Invalid(id, name,
                     absl::StrCat(td.src_size(), " sources, at most ", kMaxSrc));
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
    if ((td.flags() & ~kKnownFlags) != 0) {
      return Invalid(id, name, absl::StrCat("unknown flags ", td.flags()));
    }
    t.flags = td.flags() & ~static_cast<uint32_t>(kFlagInput);

    if (td.has_data()) {
      TESSERA_RETURN_IF_ERROR(PlaceData(id, t, td.data(), bytes));
    } else if (t.op == Op::kNone && !t.IsView()) {
      t.flags |= kFlagInput;
    }

    if (absl::Status s = ValidateNode(t); !s.ok()) {
      return Invalid(id, name, s.message());
    }
    out_.by_id.emplace(id, &t);
    ids_.emplace(&t, id);
    order_.push_back(&t);
    return absl::OkStatus();
  }

  // Points a tensor at (buffer, offset) of the session after checking that
  // its `bytes` lie inside the buffer.
  absl::Status PlaceData(uint32_t id, Tensor& t, const v1::TensorRef& ref,
                         uint64_t bytes) {
    if (t.IsView()) {
      return Invalid(id, t.name, "a view may not have data (it takes its source's)");
    }
    absl::StatusOr<std::shared_ptr<Buffer>> buffer = resolve_(ref.buffer());
    if (!buffer.ok()) {
      return absl::Status(buffer.status().code(),
                          absl::StrCat("[DecodeGraph] ", Label(id, t.name),
                                       ": data: ", buffer.status().message()));
    }
    const uint64_t size = (*buffer)->size();
    if (ref.offset() > size || bytes > size - ref.offset()) {
      return Invalid(id, t.name,
                     absl::StrCat("data of ", bytes, " bytes at offset ",
                                  ref.offset(), " is outside buffer ",
                                  ref.buffer(), " of ", size, " bytes"));
    }
    t.buffer = buffer->get();
    t.data = static_cast<char*>((*buffer)->base()) + ref.offset();
    out_.buffers.push_back(*std::move(buffer));
    return absl::OkStatus();
  }

  const BufferResolver& resolve_;
  const DecodeLimits& limits_;
  DecodedGraph& out_;
  absl::flat_hash_map<const Tensor*, uint32_t> ids_;
  std::vector<Tensor*> order_;
};

}  // namespace

absl::StatusOr<Tensor*> DecodedGraph::Find(uint32_t id,
                                           absl::string_view what) const {
  auto it = by_id.find(id);
  if (it == by_id.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the graph has no tensor with id ", id));
  }
  return it->second;
}

absl::StatusOr<std::unique_ptr<DecodedGraph>> DecodeGraph(
    const v1::GraphDef& def, const BufferResolver& resolve,
    const DecodeLimits& limits) {
  auto out = std::make_unique<DecodedGraph>();
  Decoder decoder(resolve, limits, *out);
  TESSERA_RETURN_IF_ERROR(decoder.Tensors(def));
  TESSERA_RETURN_IF_ERROR(decoder.Nodes(def));
  return out;
}

}  // namespace tessera::server
