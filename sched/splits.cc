#include "sched/splits.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// Whether `t` holds the caller's data of an input leaf, staged per copy: the
// leaf itself or views of it that do no work (a view that does work, as
// SET_ROWS, holds data the graph computes; ViewBase finds it although the
// view's source is the root).
bool IsInputData(const Tensor& t) {
  const Tensor& base = ViewBase(t);
  return base.op == Op::kNone && base.HasFlag(kFlagInput);
}

int StreamOf(const StreamAssignment& assignment, const Tensor* t,
             int fallback) {
  auto it = assignment.find(t);
  return it == assignment.end() ? fallback : it->second;
}

// A tensor in compute memory with `like`'s type, shape and strides, so that
// a byte copy of `like` fills it element for element.
Tensor* NewSlot(Context& ctx, const Tensor& like, std::string name,
                uint32_t flags) {
  Tensor* slot = ctx.NewTensorLike(like);
  slot->op = Op::kNone;
  std::fill(std::begin(slot->op_params), std::end(slot->op_params), 0);
  std::fill(std::begin(slot->src), std::end(slot->src), nullptr);
  slot->view_src = nullptr;
  slot->view_offs = 0;
  slot->data = nullptr;
  slot->buffer = nullptr;
  slot->name = std::move(name);
  slot->flags = flags;
  return slot;
}

}  // namespace

SplitPlan BuildSplitPlan(const Graph& graph, const StreamAssignment& assignment,
                         const StreamSet& streams, int n_copies) {
  SplitPlan plan;
  plan.ctx = std::make_unique<Context>();
  Context& ctx = *plan.ctx;
  const int fallback = streams.fallback();
  auto nodes = graph.nodes();
  auto leafs = graph.leafs();

  // 1. Shadows.
  auto add_shadow = [&](Tensor* t) {
    Tensor* shadow = ctx.NewTensorLike(*t);
    if (streams.IsPreallocated(*t)) {
      shadow->data = t->data;
      shadow->buffer = t->buffer;
    } else {
      plan.write_back.emplace_back(t, shadow);
    }
    plan.shadow[t] = shadow;
    plan.original[shadow] = t;
  };
  for (Tensor* leaf : leafs) add_shadow(leaf);
  for (Tensor* node : nodes) add_shadow(node);
  auto remap = [&](Tensor* t) {
    Tensor* shadow = plan.shadow.at(t);
    for (int j = 0; j < kMaxSrc; ++j) {
      if (t->src[j] != nullptr) shadow->src[j] = plan.shadow.at(t->src[j]);
    }
    if (t->view_src != nullptr) shadow->view_src = plan.shadow.at(t->view_src);
  };
  for (Tensor* leaf : leafs) remap(leaf);
  for (Tensor* node : nodes) remap(node);

  // 2. Splits.
  const int n = static_cast<int>(nodes.size());
  for (int i = 0; i < n; ++i) {
    if (DoesNoWork(*nodes[i])) continue;
    int id = StreamOf(assignment, nodes[i], fallback);
    if (!plan.splits.empty() && plan.splits.back().stream == id) continue;
    Split split;
    split.stream = id;
    split.begin = plan.splits.empty() ? 0 : i;
    if (!plan.splits.empty()) plan.splits.back().end = i;
    plan.splits.push_back(std::move(split));
  }
  if (!plan.splits.empty()) plan.splits.back().end = n;

  // 3. Inputs.
  const uint32_t copied_flags =
      n_copies > 1 ? (kFlagInput | kFlagOutput) : uint32_t{0};
  absl::flat_hash_map<std::pair<const Tensor*, int>, int> input_of;
  // Per shadow that reads slots: (source index, input index).
  std::vector<std::pair<Tensor*, std::vector<std::pair<int, int>>>> rewired;
  for (Split& split : plan.splits) {
    const int d = split.stream;
    for (int i = split.begin; i < split.end; ++i) {
      Tensor* node = nodes[i];
      if (DoesNoWork(*node)) continue;
      Tensor* shadow = plan.shadow.at(node);
      std::vector<std::pair<int, int>> reads;
      for (int j = 0; j < kMaxSrc; ++j) {
        Tensor* src = node->src[j];
        if (src == nullptr) continue;
        const bool staged =
            IsInputData(*src) && !streams.IsPreallocated(ViewRoot(*src));
        int source_stream = -1;
        if (!staged) {
          source_stream = StreamOf(assignment, src, fallback);
          if (source_stream == d) continue;
          if (IsConstant(*src)) {
            if (Buffer* buffer = streams.PreallocatedBuffer(*src)) {
              if (streams.device(d).SupportsBufferType(buffer->type())) {
                continue;
              }
              source_stream = -1;
            }
          }
        }
        auto [it, inserted] = input_of.try_emplace(
            std::make_pair(static_cast<const Tensor*>(src), d),
            static_cast<int>(plan.inputs.size()));
        if (inserted) {
          SplitInput input;
          input.source = plan.shadow.at(src);
          input.source_stream = source_stream;
          input.stream = d;
          input.staged = staged;
          for (int c = 0; c < n_copies; ++c) {
            input.slots.push_back(NewSlot(
                ctx, *src,
                absl::StrCat(streams.device(d).name(), "#", src->name, "#", c),
                staged ? uint32_t{kFlagInput} : copied_flags));
          }
          if (staged) {
            ++plan.n_staged;
          } else {
            input.slots[0]->src[0] = input.source;
            split.inputs.push_back(it->second);
            ++plan.n_copied;
          }
          plan.inputs.push_back(std::move(input));
        }
        shadow->src[j] = plan.inputs[it->second].slots[0];
        reads.emplace_back(j, it->second);
      }
      if (!reads.empty()) rewired.emplace_back(shadow, std::move(reads));
    }
  }

  // Per-copy clones of the shadows that read slots, and of every shadow
  // that reads a clone (directly or as its view source), so that each
  // copy's graphs are whole graphs: a node's sources are nodes of the same
  // copy. Nodes come in order, so sources are cloned before their readers.
  absl::flat_hash_map<const Tensor*, const std::vector<std::pair<int, int>>*>
      reads_of;
  for (const auto& [shadow, reads] : rewired) reads_of[shadow] = &reads;
  plan.clone_of.resize(n_copies);
  for (int c = 1; c < n_copies; ++c) {
    auto& clone_of = plan.clone_of[c];
    for (Tensor* node : nodes) {
      Tensor* shadow = plan.shadow.at(node);
      auto reads = reads_of.find(shadow);
      bool reads_clone = clone_of.contains(shadow->view_src);
      for (const Tensor* src : shadow->src) {
        reads_clone = reads_clone || clone_of.contains(src);
      }
      if (reads == reads_of.end() && !reads_clone) continue;
      Tensor* clone = ctx.NewTensorLike(*shadow);
      for (Tensor*& src : clone->src) {
        if (auto it = clone_of.find(src); it != clone_of.end()) {
          src = it->second;
        }
      }
      if (auto it = clone_of.find(clone->view_src); it != clone_of.end()) {
        clone->view_src = it->second;
      }
      if (reads != reads_of.end()) {
        for (const auto& [j, input] : *reads->second) {
          clone->src[j] = plan.inputs[input].slots[c];
        }
      }
      clone_of[shadow] = clone;
      plan.clones.emplace_back(clone, shadow);
      plan.original[clone] = plan.original.at(shadow);
    }
  }

  // 4. The allocation graph.
  plan.alloc_graph = std::make_unique<Graph>(nodes.size() + leafs.size() +
                                             plan.inputs.size() * n_copies);
  Graph& alloc = *plan.alloc_graph;
  for (Tensor* leaf : leafs) {
    alloc.AddLeaf(plan.shadow.at(leaf));
    plan.alloc_leaf_ids.push_back(StreamOf(assignment, leaf, fallback));
  }
  for (const SplitInput& input : plan.inputs) {
    for (int c = input.staged ? 0 : 1; c < n_copies; ++c) {
      alloc.AddLeaf(input.slots[c]);
      plan.alloc_leaf_ids.push_back(input.stream);
    }
  }
  auto add_nodes = [&](int begin, int end) {
    for (int i = begin; i < end; ++i) {
      alloc.AddNode(plan.shadow.at(nodes[i]));
      plan.alloc_node_ids.push_back(StreamOf(assignment, nodes[i], fallback));
    }
  };
  if (plan.splits.empty()) add_nodes(0, n);
  for (const Split& split : plan.splits) {
    for (int input : split.inputs) {
      alloc.AddNode(plan.inputs[input].slots[0]);
      plan.alloc_node_ids.push_back(split.stream);
    }
    add_nodes(split.begin, split.end);
  }
  return plan;
}

void FinishSplitPlan(const Graph& graph, const StreamAssignment& assignment,
                     SplitPlan& plan) {
  for (auto& [original, shadow] : plan.write_back) {
    original->data = shadow->data;
    original->buffer = shadow->buffer;
  }
  for (auto& [clone, shadow] : plan.clones) {
    clone->data = shadow->data;
    clone->buffer = shadow->buffer;
  }
  auto nodes = graph.nodes();
  const int n_copies = static_cast<int>(plan.clone_of.size());
  for (Split& split : plan.splits) {
    split.graphs.clear();
    for (int c = 0; c < n_copies; ++c) {
      auto g = std::make_unique<Graph>(split.end - split.begin);
      for (int i = split.begin; i < split.end; ++i) {
        auto it = assignment.find(nodes[i]);
        if (it == assignment.end() || it->second != split.stream) continue;
        Tensor* t = plan.shadow.at(nodes[i]);
        if (c > 0) {
          auto clone = plan.clone_of[c].find(t);
          if (clone != plan.clone_of[c].end()) t = clone->second;
        }
        g->AddNode(t);
      }
      split.graphs.push_back(std::move(g));
    }
  }
}

}  // namespace tessera
