#include "sched/assignment.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera {

StreamSet::StreamSet(std::vector<Stream*> streams,
                     std::vector<BufferType*> compute_types)
    : streams_(std::move(streams)), compute_types_(std::move(compute_types)) {}

int StreamSet::IndexOf(const Stream* stream) const {
  auto it = std::find(streams_.begin(), streams_.end(), stream);
  return it == streams_.end() ? -1 : static_cast<int>(it - streams_.begin());
}

bool StreamSet::IsComputeBuffer(const Buffer* buffer) const {
  return buffer != nullptr &&
         std::find(compute_buffers_.begin(), compute_buffers_.end(), buffer) !=
             compute_buffers_.end();
}

Buffer* StreamSet::PreallocatedBuffer(const Tensor& t) const {
  const Tensor& root = ViewRoot(t);
  return IsPreallocated(root) ? root.buffer : nullptr;
}

bool StreamSet::Supports(int i, const Tensor& node) const {
  return DoesNoWork(node) || device(i).SupportsOp(node);
}

const Tensor& ViewRoot(const Tensor& t) {
  const Tensor* root = &t;
  while (root->view_src != nullptr) root = root->view_src;
  return *root;
}

bool DoesNoWork(const Tensor& t) { return t.op == Op::kNone || IsViewOp(t.op); }

const Tensor& ViewBase(const Tensor& t) {
  const Tensor* cur = &t;
  while (cur->view_src != nullptr && DoesNoWork(*cur)) {
    cur = cur->src[0] != nullptr ? cur->src[0] : cur->view_src;
  }
  return *cur;
}

bool IsConstant(const Tensor& t) { return ViewBase(t).op == Op::kNone; }

namespace {

std::string NodeLabel(const Tensor& t) {
  return absl::StrCat("'", t.name, "' (", std::string(OpName(t.op)), ", ",
                      Describe(t), ")");
}

// The passes over one graph. Pass numbers follow ggml's scheduler.
class Assigner {
 public:
  Assigner(const Graph& graph, const StreamSet& streams,
           const StreamAssignment& pins)
      : graph_(graph), streams_(streams), ids_(pins) {}

  absl::StatusOr<StreamAssignment> Run() {
    if (absl::Status s = CheckSources(); !s.ok()) return s;
    PreallocatedAndWeights();
    Expand();
    UpgradeAndPlaceRest();
    SourcesAndViews();
    if (absl::Status s = MoveUnsupported(); !s.ok()) return s;
    return std::move(ids_);
  }

 private:
  int Get(const Tensor* t) const {
    auto it = ids_.find(t);
    return it == ids_.end() ? -1 : it->second;
  }
  void Set(const Tensor* t, int id) {
    if (id >= 0) ids_[t] = id;
  }

  absl::Status CheckSources() const {
    absl::flat_hash_set<const Tensor*> in_graph;
    in_graph.insert(graph_.leafs().begin(), graph_.leafs().end());
    in_graph.insert(graph_.nodes().begin(), graph_.nodes().end());
    for (const Tensor* t : graph_.nodes()) {
      for (const Tensor* src : t->src) {
        if (src != nullptr && !in_graph.contains(src)) {
          return absl::InvalidArgumentError(
              absl::StrCat("[Scheduler] node ", NodeLabel(*t), " has source '",
                           src->name, "' that is not in the graph"));
        }
      }
      if (t->view_src != nullptr && !in_graph.contains(t->view_src)) {
        return absl::InvalidArgumentError(
            absl::StrCat("[Scheduler] node ", NodeLabel(*t), " views '",
                         t->view_src->name, "' that is not in the graph"));
      }
    }
    return absl::OkStatus();
  }

  // The stream that computes `op` in the pre-allocated memory of `t`: first
  // a stream of the device that owns the memory, else the highest-priority
  // stream whose device can use that buffer type; -1 when none also
  // supports `op` (or `t` is not pre-allocated).
  int StreamFromBuffer(const Tensor& t, const Tensor& op) const {
    Buffer* buffer = streams_.PreallocatedBuffer(t);
    if (buffer == nullptr) return -1;
    BufferType& type = buffer->type();
    for (int i = 0; i < streams_.size(); ++i) {
      if (&streams_.device(i) == &type.device() &&
          streams_.device(i).SupportsBufferType(type) &&
          streams_.Supports(i, op)) {
        return i;
      }
    }
    for (int i = 0; i < streams_.size(); ++i) {
      if (streams_.device(i).SupportsBufferType(type) &&
          streams_.Supports(i, op)) {
        return i;
      }
    }
    return -1;
  }

  // Pass 1's choice for one tensor (ggml_backend_sched_backend_id_from_cur).
  int FromCurrent(const Tensor& t) const {
    int id = StreamFromBuffer(t, t);
    if (id >= 0 || streams_.PreallocatedBuffer(t) != nullptr) return id;
    if (t.HasFlag(kFlagInput)) return streams_.fallback();
    // ROPE's frequency factors are too small to decide where it runs.
    if (t.op == Op::kRope) return -1;
    for (const Tensor* src : t.src) {
      if (src == nullptr) continue;
      Buffer* buffer = streams_.PreallocatedBuffer(*src);
      if (buffer != nullptr && buffer->usage() == BufferUsage::kWeights) {
        return StreamFromBuffer(*src, t);
      }
    }
    return -1;
  }

  // Pass 1: tensors in pre-allocated memory go where that memory is; graph
  // inputs to the fallback; ops with a weight source where the weight is
  // (when that device supports the op). Sources of newly assigned nodes are
  // assigned the same way.
  void PreallocatedAndWeights() {
    for (const Tensor* leaf : graph_.leafs()) {
      if (Get(leaf) < 0) Set(leaf, FromCurrent(*leaf));
    }
    for (const Tensor* node : graph_.nodes()) {
      if (Get(node) >= 0) continue;
      Set(node, FromCurrent(*node));
      for (const Tensor* src : node->src) {
        if (src != nullptr && Get(src) < 0) Set(src, FromCurrent(*src));
      }
    }
  }

  void SetIfSupported(const Tensor* node, int id) {
    if (streams_.Supports(id, *node)) Set(node, id);
  }

  // One sweep of pass 2 over the nodes that compute, forward or backward:
  // each unassigned node takes the stream of the last assigned one. With
  // `skip_fallback`, the fallback stream does not spread.
  template <typename It>
  void ExpandSweep(It begin, It end, bool skip_fallback) {
    int cur = -1;
    for (It it = begin; it != end; ++it) {
      const Tensor* node = *it;
      if (DoesNoWork(*node)) continue;
      int id = Get(node);
      if (id >= 0) {
        cur = (skip_fallback && id == streams_.fallback()) ? -1 : id;
      } else if (cur >= 0) {
        SetIfSupported(node, cur);
      }
    }
  }

  // Pass 2: expand assignments to neighbouring unassigned nodes: the
  // non-fallback streams down then up, then every stream down then up. So
  // the fallback computes only what its weights pin there or what lies
  // between fallback ops. An op the spreading stream does not support stays
  // unassigned until pass 3, when its sources' places are known.
  void Expand() {
    auto nodes = graph_.nodes();
    ExpandSweep(nodes.begin(), nodes.end(), /*skip_fallback=*/true);
    ExpandSweep(nodes.rbegin(), nodes.rend(), /*skip_fallback=*/true);
    ExpandSweep(nodes.begin(), nodes.end(), /*skip_fallback=*/false);
    ExpandSweep(nodes.rbegin(), nodes.rend(), /*skip_fallback=*/false);
  }

  // Whether stream `i`'s device can use the memory `t` has or will have.
  bool BufferSupported(const Tensor& t, int i) const {
    const BufferType* type = nullptr;
    if (Buffer* buffer = streams_.PreallocatedBuffer(t)) {
      type = &buffer->type();
    } else {
      int id = Get(&t);
      if (id < 0 && t.view_src != nullptr) id = Get(&ViewRoot(t));
      if (id >= 0) type = &streams_.compute_type(id);
    }
    return type != nullptr && streams_.device(i).SupportsBufferType(*type);
  }

  // Pass 3: a node moves to a higher-priority stream that computes in the
  // same buffer type, supports the op and can use every source. A node still
  // unassigned goes to the stream that supports it and can use the most of
  // its sources.
  void UpgradeAndPlaceRest() {
    for (const Tensor* node : graph_.nodes()) {
      if (DoesNoWork(*node)) continue;
      int id = Get(node);
      if (id < 0) {
        int best_count = -1;
        for (int i = 0; i < streams_.size(); ++i) {
          if (!streams_.Supports(i, *node)) continue;
          int count = 0;
          for (const Tensor* src : node->src) {
            if (src == nullptr) continue;
            bool placed = Get(src) >= 0 || (src->view_src != nullptr &&
                                            Get(&ViewRoot(*src)) >= 0);
            if (placed && BufferSupported(*src, i)) ++count;
          }
          if (count > best_count) {
            best_count = count;
            Set(node, i);
          }
        }
        continue;
      }
      for (int i = 0; i < id; ++i) {
        if (&streams_.compute_type(i) != &streams_.compute_type(id) ||
            !streams_.Supports(i, *node)) {
          continue;
        }
        bool all = true;
        for (const Tensor* src : node->src) {
          if (src != nullptr && !BufferSupported(*src, i)) {
            all = false;
            break;
          }
        }
        if (all) {
          Set(node, i);
          break;
        }
      }
    }
  }

  // Pass 4: unassigned sources take the stream of their first consumer
  // (through views: the view's root does); every view takes its root's
  // stream, or that of the node it shows if that node computes into the
  // root (ViewBase); anything left (a root nothing computes from) the
  // fallback.
  void SourcesAndViews() {
    for (const Tensor* node : graph_.nodes()) {
      if (DoesNoWork(*node)) continue;
      int id = Get(node);
      if (id < 0) continue;
      for (const Tensor* src : node->src) {
        if (src == nullptr) continue;
        const Tensor* root = &ViewRoot(*src);
        if (Get(root) < 0) Set(root, id);
      }
    }
    auto place = [&](const Tensor* t) {
      const Tensor* root = &ViewRoot(*t);
      if (Get(root) < 0) Set(root, streams_.fallback());
      if (root == t || !DoesNoWork(*t)) return;
      // A view of a node that computes (a SET_ROWS) is that node's value
      // there: it takes the node's stream, so that readers elsewhere copy
      // it after the node ran.
      const Tensor* base = &ViewBase(*t);
      Set(t,
          base->view_src != nullptr && Get(base) >= 0 ? Get(base) : Get(root));
    };
    for (const Tensor* leaf : graph_.leafs()) place(leaf);
    for (const Tensor* node : graph_.nodes()) place(node);
  }

  // Pass 5: a node whose stream's device does not support its op moves to
  // the next stream (in priority order, wrapping around) that does; a node
  // that writes into pre-allocated memory must run where that memory can be
  // used.
  absl::Status MoveUnsupported() {
    const int n = streams_.size();
    for (const Tensor* node : graph_.nodes()) {
      if (DoesNoWork(*node)) continue;
      int id = Get(node);
      if (id < 0 || !streams_.Supports(id, *node)) {
        int found = -1;
        for (int k = 1; k <= n && found < 0; ++k) {
          int i = ((id < 0 ? n - 1 : id) + k) % n;
          if (streams_.Supports(i, *node)) found = i;
        }
        if (found < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("[Scheduler] no stream's device supports node ",
                           NodeLabel(*node)));
        }
        id = found;
        Set(node, id);
      }
      if (Buffer* buffer = streams_.PreallocatedBuffer(*node);
          buffer != nullptr &&
          !streams_.device(id).SupportsBufferType(buffer->type())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "[Scheduler] node ", NodeLabel(*node),
            " writes into pre-allocated buffer type '",
            std::string(buffer->type().name()), "' that device '",
            streams_.device(id).name(), "' computing it cannot use"));
      }
    }
    return absl::OkStatus();
  }

  const Graph& graph_;
  const StreamSet& streams_;
  StreamAssignment ids_;
};

}  // namespace

absl::StatusOr<StreamAssignment> AssignStreams(const Graph& graph,
                                               const StreamAssignment& pins,
                                               const StreamSet& streams) {
  return Assigner(graph, streams, pins).Run();
}

}  // namespace tessera
