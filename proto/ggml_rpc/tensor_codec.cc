#include "proto/ggml_rpc/tensor_codec.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/tensor.h"
#include "model/ggml_type.h"
#include "proto/ggml_rpc/numbering.h"

namespace tessera::ggml_rpc {
namespace {

absl::Status Invalid(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("[ggml-rpc graph] ", problem));
}

// The name up to its first NUL (ggml's names are at most 63 characters).
std::string NameOf(const WireTensor& t) {
  return std::string(t.name, strnlen(t.name, kMaxName));
}

// "tensor 3 (\"name\")": its index in the payload.
std::string Label(uint32_t index, const WireTensor& t) {
  return absl::StrCat("tensor ", index, " (\"", NameOf(t), "\")");
}

absl::Status TensorError(uint32_t index, const WireTensor& t,
                         absl::string_view problem) {
  return Invalid(absl::StrCat(Label(index, t), ": ", problem));
}

// Whether `data` is `base` + `offset` (without overflow), or `base` is
// unknown (0: a tensor ggml has not allocated).
bool AtOffset(uint64_t data, uint64_t base, uint64_t offset) {
  return base == 0 || (offset <= UINT64_MAX - base && data == base + offset);
}

class GraphParser {
 public:
  GraphParser(absl::Span<const uint8_t> payload, uint32_t max_tensors,
              const PlaceFn& place)
      : payload_(payload), max_tensors_(max_tensors), place_(place) {}

  absl::StatusOr<GraphRequest> Parse() {
    TESSERA_RETURN_IF_ERROR(Sizes());
    TESSERA_RETURN_IF_ERROR(Ids());
    TESSERA_RETURN_IF_ERROR(Order());
    for (uint32_t index : order_) TESSERA_RETURN_IF_ERROR(Emit(index));
    for (uint64_t id : node_ids_) {
      const uint32_t index = by_id_.at(id);
      if (is_node_.contains(index)) out_.def.add_nodes(wire_ids_.at(index));
    }
    return std::move(out_);
  }

 private:
  // 1. device, n_nodes, node ids, n_tensors, tensors: each size checked
  //    before it is used, the whole payload accounted for.
  absl::Status Sizes() {
    if (payload_.size() < kGraphHeaderBytes) {
      return Invalid(absl::StrCat("payload of ", payload_.size(),
                                  " bytes is shorter than its header"));
    }
    uint32_t n_nodes = 0;
    std::memcpy(&out_.device, payload_.data(), sizeof(uint32_t));
    std::memcpy(&n_nodes, payload_.data() + sizeof(uint32_t), sizeof(uint32_t));
    if (n_nodes == 0 || n_nodes > max_tensors_) {
      return Invalid(
          absl::StrCat("n_nodes = ", n_nodes, ", want 1 to ", max_tensors_));
    }
    const size_t nodes_end =
        kGraphHeaderBytes + size_t{n_nodes} * sizeof(uint64_t);
    if (payload_.size() < nodes_end + sizeof(uint32_t)) {
      return Invalid(absl::StrCat("payload of ", payload_.size(),
                                  " bytes cannot hold ", n_nodes, " nodes"));
    }
    node_ids_.resize(n_nodes);
    std::memcpy(node_ids_.data(), payload_.data() + kGraphHeaderBytes,
                size_t{n_nodes} * sizeof(uint64_t));
    uint32_t n_tensors = 0;
    std::memcpy(&n_tensors, payload_.data() + nodes_end, sizeof(uint32_t));
    // Each node is a tensor of its own, so there are at least n_nodes.
    if (n_tensors < n_nodes || n_tensors > max_tensors_) {
      return Invalid(absl::StrCat("n_tensors = ", n_tensors, ", want ", n_nodes,
                                  " (n_nodes) to ", max_tensors_,
                                  " (the server's max_graph_nodes)"));
    }
    const size_t tensors_at = nodes_end + sizeof(uint32_t);
    const size_t want = tensors_at + size_t{n_tensors} * sizeof(WireTensor);
    if (payload_.size() != want) {
      return Invalid(absl::StrCat("payload of ", payload_.size(),
                                  " bytes, but ", n_nodes, " nodes and ",
                                  n_tensors, " tensors take ", want));
    }
    tensors_.resize(n_tensors);
    std::memcpy(tensors_.data(), payload_.data() + tensors_at,
                size_t{n_tensors} * sizeof(WireTensor));
    return absl::OkStatus();
  }

  // 2. Unique non-zero tensor ids; nodes name tensors, each once.
  absl::Status Ids() {
    for (uint32_t i = 0; i < tensors_.size(); ++i) {
      const uint64_t id = tensors_[i].id;
      if (id == 0) return TensorError(i, tensors_[i], "id 0");
      if (!by_id_.emplace(id, i).second) {
        return TensorError(i, tensors_[i], absl::StrCat("duplicate id ", id));
      }
    }
    for (size_t i = 0; i < node_ids_.size(); ++i) {
      auto it = by_id_.find(node_ids_[i]);
      if (it == by_id_.end()) {
        return Invalid(absl::StrCat("nodes[", i, "] = ", node_ids_[i],
                                    " is not a tensor of the payload"));
      }
      if (!listed_.insert(it->second).second) {
        return Invalid(absl::StrCat(
            "nodes[", i, "]: ", Label(it->second, tensors_[it->second]),
            " is listed twice"));
      }
      // ggml lists a tensor without an op among the nodes where it is a
      // parameter (GGML_TENSOR_FLAG_PARAM); it computes nothing there and
      // travels as a leaf.
      if (tensors_[it->second].op != kGgmlOpNone) {
        is_node_.emplace(it->second, true);
      }
    }
    return absl::OkStatus();
  }

  // The tensors `index` reads: sources and view source, by payload index.
  absl::Status Reads(uint32_t index, std::vector<uint32_t>& out) const {
    const WireTensor& t = tensors_[index];
    out.clear();
    auto add = [&](uint64_t id, absl::string_view what) -> absl::Status {
      if (id == 0) return absl::OkStatus();
      auto it = by_id_.find(id);
      if (it == by_id_.end()) {
        return TensorError(
            index, t,
            absl::StrCat(what, " = ", id, " is not a tensor of the payload"));
      }
      out.push_back(it->second);
      return absl::OkStatus();
    };
    if (!is_node_.contains(index)) return absl::OkStatus();  // a leaf
    for (int i = 0; i < kMaxSrc; ++i) {
      TESSERA_RETURN_IF_ERROR(add(t.src[i], absl::StrCat("src[", i, "]")));
    }
    return add(t.view_src, "view_src");
  }

  // 3. Depth first from the nodes (iteratively: graphs may be deep), each
  //    tensor after what it reads.
  absl::Status Order() {
    enum State : uint8_t { kNew, kOpen, kDone };
    std::vector<State> state(tensors_.size(), kNew);
    std::vector<uint32_t> reads;
    for (uint64_t root_id : node_ids_) {
      std::vector<std::pair<uint32_t, bool>> stack = {
          {by_id_.at(root_id), false}};
      while (!stack.empty()) {
        auto [index, expanded] = stack.back();
        stack.pop_back();
        if (expanded) {
          state[index] = kDone;
          order_.push_back(index);
          continue;
        }
        if (state[index] == kDone) continue;
        if (state[index] == kOpen) {
          return TensorError(index, tensors_[index], "is part of a cycle");
        }
        state[index] = kOpen;
        stack.push_back({index, true});
        TESSERA_RETURN_IF_ERROR(Reads(index, reads));
        // Reversed, so that sources come out in source order.
        for (auto it = reads.rbegin(); it != reads.rend(); ++it) {
          const uint32_t r = *it;
          if (state[r] == kOpen) {
            return TensorError(index, tensors_[index], "is part of a cycle");
          }
          if (state[r] == kNew) stack.push_back({r, false});
        }
      }
    }
    return absl::OkStatus();
  }

  // 4. One tensor into the GraphDef.
  absl::Status Emit(uint32_t index) {
    const WireTensor& t = tensors_[index];
    auto fail = [&](absl::string_view problem) {
      return TensorError(index, t, problem);
    };
    // Fields by value (protocol.h): these also go to StrCat, which takes
    // its later arguments by reference.
    const uint64_t buffer = t.buffer;
    const uint64_t data = t.data;
    const uint64_t view_src = t.view_src;
    const uint64_t view_offs = t.view_offs;
    const bool node = is_node_.contains(index);
    const uint32_t wire_id = static_cast<uint32_t>(wire_ids_.size());
    v1::TensorDef& td = *out_.def.add_tensors();
    td.set_id(wire_id);
    td.set_name(NameOf(t));
    absl::StatusOr<Type> type = TesseraTypeFromGgml(
        static_cast<int32_t>(t.type > INT32_MAX ? INT32_MAX : t.type));
    if (!type.ok()) return fail(type.status().message());
    td.set_type(static_cast<int32_t>(*type));
    for (int i = 0; i < kMaxDims; ++i) {
      td.add_ne(t.ne[i]);
      td.add_nb(t.nb[i]);
    }
    absl::StatusOr<uint32_t> flags = FlagsFromGgml(t.flags);
    if (!flags.ok()) return fail(flags.status().message());
    td.set_flags(*flags);
    bool view = false;
    if (node) {
      // Fields by value, element by element (protocol.h).
      int32_t op_params[kMaxOpParams];
      for (int i = 0; i < kMaxOpParams; ++i) op_params[i] = t.op_params[i];
      absl::StatusOr<MappedOp> op = OpFromGgml(t.op, op_params);
      if (!op.ok()) return fail(op.status().message());
      td.set_op(static_cast<int32_t>(op->op));
      for (int32_t p : op->op_params) td.add_op_params(p);
      uint64_t srcs[kMaxSrc];
      for (int i = 0; i < kMaxSrc; ++i) srcs[i] = t.src[i];
      // The tensor whose memory a view's result is, where tessera's node is
      // a view of it; 0 for other ops.
      uint64_t viewed = 0;
      switch (op->op) {
        case Op::kView:
        case Op::kReshape:
        case Op::kPermute:
        case Op::kTranspose:
          viewed = srcs[0];
          break;
        case Op::kCpy:
          viewed = srcs[1];
          break;
        case Op::kSetRows:
          // ggml also lists the destination as src[2] (a legacy order;
          // older clients leave it out); tessera's node names it as its
          // view source only.
          viewed = srcs[2] != 0 ? srcs[2] : view_src;
          srcs[2] = 0;
          break;
        default:
          break;
      }
      for (int i = 0; i < kMaxSrc; ++i) {
        td.add_src(srcs[i] == 0 ? -1
                                : static_cast<int64_t>(
                                      wire_ids_.at(by_id_.at(srcs[i]))));
      }
      // Other ops with a view source are ggml's in-place forms: tessera
      // computes them as ordinary nodes whose data is that memory (at its
      // root's address plus the offset, as ggml's views are).
      view = view_src != 0 && viewed != 0;
      if (view_src != 0 && !view) {
        const uint64_t root_data = tensors_[by_id_.at(view_src)].data;
        if (data == 0 || !AtOffset(data, root_data, view_offs)) {
          return fail(absl::StrCat("an in-place result at data 0x",
                                   absl::Hex(data), ", not at its source's 0x",
                                   absl::Hex(root_data), " + view_offs ",
                                   view_offs));
        }
      }
      if (view) {
        // ggml and tessera point a view at the root of a chain of views,
        // its offset summed. A view of a tensor that travels here without
        // its view source (a leaf that is ggml's view, an in-place result)
        // views that tensor.
        uint32_t source = by_id_.at(view_src);
        uint64_t offs = view_offs;
        if (viewed != view_src) {
          const uint32_t from = by_id_.at(viewed);
          const WireTensor& v = tensors_[from];
          if (unviewed_.contains(from) && v.view_src == view_src &&
              view_offs >= v.view_offs) {
            source = from;
            offs = view_offs - v.view_offs;
          }
        }
        td.set_view_src(wire_ids_.at(source));
        td.set_view_offs(offs);
        const uint64_t source_data = tensors_[source].data;
        if (data != 0 && !AtOffset(data, source_data, offs)) {
          return fail(absl::StrCat(
              "data 0x", absl::Hex(data), " is not its view source's data 0x",
              absl::Hex(source_data), " + view_offs ", offs));
        }
      }
    }
    if (!view) {
      if ((buffer == 0) != (data == 0)) {
        return fail("has a buffer without data or data without a buffer");
      }
      if (data == 0 && !node) return fail("a leaf without data");
      if (data != 0) {
        absl::StatusOr<uint64_t> bytes = TensorBytes(t);
        if (!bytes.ok()) return fail(bytes.status().message());
        absl::StatusOr<v1::TensorRef> ref = place_(buffer, data, *bytes);
        if (!ref.ok()) return fail(ref.status().message());
        *td.mutable_data() = *std::move(ref);
      }
    }
    if (view_src != 0 && !view) unviewed_.insert(index);
    wire_ids_.emplace(index, wire_id);
    return absl::OkStatus();
  }

  const absl::Span<const uint8_t> payload_;
  const uint32_t max_tensors_;
  const PlaceFn& place_;
  std::vector<uint64_t> node_ids_;
  std::vector<WireTensor> tensors_;
  absl::flat_hash_map<uint64_t, uint32_t> by_id_;  // id -> index
  absl::flat_hash_set<uint32_t> listed_;           // indices in nodes
  // Indices emitted without the view source ggml gave them (leaves that
  // are ggml's views, in-place results).
  absl::flat_hash_set<uint32_t> unviewed_;
  absl::flat_hash_map<uint32_t, bool> is_node_;       // listed, with an op
  absl::flat_hash_map<uint32_t, uint32_t> wire_ids_;  // index -> wire id
  std::vector<uint32_t> order_;
  GraphRequest out_;
};

}  // namespace

absl::StatusOr<uint64_t> TensorBytes(const WireTensor& t) {
  const GgmlTypeLayout* layout =
      t.type > INT32_MAX ? nullptr
                         : FindGgmlTypeLayout(static_cast<int32_t>(t.type));
  if (layout == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml type ", t.type, " has no known block layout"));
  }
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] == 0) return 0;
  }
  if (t.ne[0] % layout->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ne[0] = ", t.ne[0], " is not a multiple of the block size ",
        layout->block_size, " of ",
        GgmlTypeName(static_cast<int32_t>(t.type))));
  }
  // ne and nb are 32-bit, so every product fits in 64 bits and the sum of
  // five of them does too.
  uint64_t bytes = layout->block_size == 1
                       ? layout->type_size
                       : uint64_t{t.ne[0]} * t.nb[0] / layout->block_size;
  for (int i = layout->block_size == 1 ? 0 : 1; i < kMaxDims; ++i) {
    bytes += uint64_t{t.ne[i] - 1} * t.nb[i];
  }
  return bytes;
}

absl::StatusOr<GraphRequest> ParseGraph(absl::Span<const uint8_t> payload,
                                        uint32_t max_tensors,
                                        const PlaceFn& place) {
  return GraphParser(payload, max_tensors, place).Parse();
}

}  // namespace tessera::ggml_rpc
