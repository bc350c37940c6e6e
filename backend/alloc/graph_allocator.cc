#include "backend/alloc/graph_allocator.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backend/alloc/free_list.h"
#include "base/status_macros.h"
#include "backend/alloc/tensor_allocator.h"

namespace tessera {

namespace {

// Where planning put each tensor of a graph, and how big each buffer must be.
struct PlanData {
  struct Placement {
    Tensor* tensor;
    int id;
    size_t offset;
  };
  // Per buffer id: the high-water mark of its free list.
  std::vector<size_t> sizes;
  // Tensors given memory of their own (or taken over in place).
  std::vector<Placement> placements;
  // Views without data, each after its view source when that is a view too.
  std::vector<Tensor*> views;
};

// Ops whose reference kernels are correct with dst aliasing src[0].
bool MayRunInPlace(Op op) {
  switch (op) {
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
    case Op::kScale:
    case Op::kSqr:
    case Op::kSqrt:
    case Op::kLog:
    case Op::kUnary:
    case Op::kNorm:
    case Op::kRmsNorm:
    case Op::kSoftMax:
    case Op::kRope:
      return true;
    default:
      return false;
  }
}

bool SameLayout(const Tensor& a, const Tensor& b) {
  if (a.type != b.type) return false;
  for (int i = 0; i < kMaxDims; ++i) {
    if (a.ne[i] != b.ne[i] || a.nb[i] != b.nb[i]) return false;
  }
  return true;
}

bool IsPinned(const Tensor& t) {
  return t.HasFlag(kFlagInput) || t.HasFlag(kFlagOutput);
}

std::string Name(const Tensor& t) {
  return t.name.empty() ? Describe(t) : t.name;
}

// Runs steps 1-4 of the planning algorithm (graph_allocator.h) for one
// graph over one FreeList per buffer id.
class Planner {
 public:
  Planner(absl::Span<BufferType* const> types, PlanData& plan)
      : types_(types), plan_(plan) {
    lists_.reserve(types.size());
    for (BufferType* type : types) lists_.emplace_back(type->alignment());
  }

  absl::Status Run(const Graph& graph, absl::Span<const int> node_ids,
                   absl::Span<const int> leaf_ids);

 private:
  struct State {
    int id = -1;                  // buffer id; -1 until known
    int consumers = 0;            // consumers that have not run yet
    bool holds_view_src = false;  // a view counted as a consumer of its source
    bool placed = false;          // Place() has handled it
    bool resolved = false;        // it will have data once the plan is applied
    bool owns = false;  // [offset, offset + size) of list `id` is its own
    size_t offset = 0;
    size_t size = 0;
  };

  State& Get(const Tensor* t, int id_hint);
  void CountViewOf(const Tensor* t);
  absl::Status Place(Tensor* t, int id_hint);
  absl::Status PlaceNode(Tensor* node, int id);
  void Release(const Tensor* t);

  absl::Span<BufferType* const> types_;
  PlanData& plan_;
  std::vector<FreeList> lists_;
  // Node-based: references stay valid while entries are added.
  absl::node_hash_map<const Tensor*, State> states_;
};

Planner::State& Planner::Get(const Tensor* t, int id_hint) {
  State& s = states_[t];
  if (s.id < 0) s.id = id_hint;
  return s;
}

// A view is a consumer of its view source until its own consumers have run.
void Planner::CountViewOf(const Tensor* t) {
  while (t->IsView()) {
    State& s = states_[t];
    if (s.holds_view_src) return;
    s.holds_view_src = true;
    t = t->view_src;
    ++states_[t].consumers;
  }
}

absl::Status Planner::Place(Tensor* t, int id_hint) {
  State& s = Get(t, id_hint);
  if (s.placed) return absl::OkStatus();
  s.placed = true;
  if (t->data != nullptr) {
    s.resolved = true;
    return absl::OkStatus();
  }
  if (t->IsView()) {
    TESSERA_RETURN_IF_ERROR(Place(t->view_src, s.id));
    if (!states_[t->view_src].resolved) {
      return absl::InvalidArgumentError(
          absl::StrCat("[GraphAllocator] view ", Name(*t), " of ",
                       Name(*t->view_src), " is part of a cycle of views"));
    }
    s.resolved = true;
    plan_.views.push_back(t);
    return absl::OkStatus();
  }
  BufferType& type = *types_[s.id];
  const size_t size = type.AllocSize(*t);
  // Bounding every step keeps the high-water mark from overflowing.
  const size_t limit = std::min<size_t>(type.max_size(), SIZE_MAX / 4);
  if (size > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("[GraphAllocator] ", Describe(*t), " needs ", size,
                     " bytes; buffer type ", std::string(type.name()),
                     " allows at most ", type.max_size()));
  }
  FreeList& list = lists_[s.id];
  s.offset = list.Alloc(size);
  s.size = size;
  s.owns = true;
  s.resolved = true;
  if (list.high_water() > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "[GraphAllocator] buffer id ", s.id, " needs more than ", limit,
        " bytes at ", Describe(*t), "; buffer type ", std::string(type.name()),
        " allows at most ", type.max_size()));
  }
  plan_.placements.push_back({t, s.id, s.offset});
  return absl::OkStatus();
}

// Places a node after its sources: in place of src[0] when allowed,
// otherwise as any tensor.
absl::Status Planner::PlaceNode(Tensor* node, int id) {
  State& s = Get(node, id);
  if (s.placed || node->data != nullptr || node->IsView() ||
      !MayRunInPlace(node->op) || node->src[0] == nullptr) {
    return Place(node, id);
  }
  const Tensor* parent = node->src[0];
  State& p = states_[parent];
  // `owns` excludes views, tensors that had data and ranges handed on.
  const bool in_place = p.owns && !IsPinned(*parent) && p.id == s.id &&
                        p.consumers == 1 && SameLayout(*parent, *node) &&
                        types_[s.id]->AllocSize(*node) == p.size;
  if (!in_place) return Place(node, id);
  s.placed = s.resolved = s.owns = true;
  s.offset = p.offset;
  s.size = p.size;
  p.owns = false;
  plan_.placements.push_back({node, s.id, s.offset});
  return absl::OkStatus();
}

// Called when the last consumer of `t` has run.
void Planner::Release(const Tensor* t) {
  State& s = states_[t];
  if (t->IsView()) {
    if (!s.holds_view_src) return;
    s.holds_view_src = false;
    const Tensor* src = t->view_src;
    if (--states_[src].consumers == 0) Release(src);
    return;
  }
  if (!s.owns || IsPinned(*t)) return;
  s.owns = false;
  lists_[s.id].Free(s.offset, s.size);
}

absl::Status Planner::Run(const Graph& graph, absl::Span<const int> node_ids,
                          absl::Span<const int> leaf_ids) {
  absl::Span<Tensor* const> nodes = graph.nodes();
  absl::Span<Tensor* const> leafs = graph.leafs();
  auto node_id = [&](size_t i) { return node_ids.empty() ? 0 : node_ids[i]; };
  auto leaf_id = [&](size_t i) { return leaf_ids.empty() ? 0 : leaf_ids[i]; };

  // Buffer ids of the graph's own tensors; others take their consumer's.
  for (size_t i = 0; i < leafs.size(); ++i) Get(leafs[i], leaf_id(i));
  for (size_t i = 0; i < nodes.size(); ++i) Get(nodes[i], node_id(i));

  // 1. Consumers: one per source slot of each node, one per view.
  for (Tensor* leaf : leafs) CountViewOf(leaf);
  for (Tensor* node : nodes) {
    CountViewOf(node);
    for (Tensor* src : node->src) {
      if (src == nullptr) continue;
      ++states_[src].consumers;
      CountViewOf(src);
    }
  }

  // 2. Inputs first.
  for (size_t i = 0; i < leafs.size(); ++i) {
    if (leafs[i]->HasFlag(kFlagInput)) {
      TESSERA_RETURN_IF_ERROR(Place(leafs[i], leaf_id(i)));
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (Tensor* src : nodes[i]->src) {
      if (src != nullptr && src->HasFlag(kFlagInput)) {
        TESSERA_RETURN_IF_ERROR(Place(src, node_id(i)));
      }
    }
    if (nodes[i]->HasFlag(kFlagInput)) {
      TESSERA_RETURN_IF_ERROR(Place(nodes[i], node_id(i)));
    }
  }

  // 3. and 4. Sources, the node, then what the node was the last to need.
  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor* node = nodes[i];
    for (Tensor* src : node->src) {
      if (src == nullptr) continue;
      TESSERA_RETURN_IF_ERROR(Place(src, node_id(i)));
    }
    TESSERA_RETURN_IF_ERROR(PlaceNode(node, node_id(i)));
    for (Tensor* src : node->src) {
      if (src != nullptr && --states_[src].consumers == 0) Release(src);
    }
  }

  // Leafs no node reads still get memory, for as long as the graph.
  for (size_t i = 0; i < leafs.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(Place(leafs[i], leaf_id(i)));
  }

  plan_.sizes.clear();
  for (const FreeList& list : lists_) plan_.sizes.push_back(list.high_water());
  return absl::OkStatus();
}

absl::Status CheckIds(absl::Span<Tensor* const> tensors,
                      absl::Span<const int> ids, absl::string_view what,
                      size_t num_buffers) {
  if (!ids.empty() && ids.size() != tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[GraphAllocator] ", ids.size(), " ", what, " ids for ",
                     tensors.size(), " ", what, "s"));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int id = ids.empty() ? 0 : ids[i];
    if (id < 0 || static_cast<size_t>(id) >= num_buffers) {
      return absl::InvalidArgumentError(
          absl::StrCat("[GraphAllocator] ", what, " ", i, " (",
                       Name(*tensors[i]), ") names buffer id ", id,
                       " but there are ", num_buffers, " buffer types"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct GraphAllocator::Plan : PlanData {};

GraphAllocator::GraphAllocator(std::vector<BufferType*> types)
    : types_(std::move(types)), buffers_(types_.size()) {}

size_t GraphAllocator::buffer_size(int id) const {
  if (id < 0 || static_cast<size_t>(id) >= buffers_.size() ||
      buffers_[id] == nullptr) {
    return 0;
  }
  return buffers_[id]->size();
}

absl::Status GraphAllocator::MakePlan(const Graph& graph,
                                      absl::Span<const int> node_ids,
                                      absl::Span<const int> leaf_ids,
                                      Plan& plan) const {
  TESSERA_RETURN_IF_ERROR(
      CheckIds(graph.nodes(), node_ids, "node", types_.size()));
  TESSERA_RETURN_IF_ERROR(
      CheckIds(graph.leafs(), leaf_ids, "leaf", types_.size()));
  return Planner(types_, plan).Run(graph, node_ids, leaf_ids);
}

// Replaces every buffer smaller than the plan needs; the old one is freed
// first so that both never hold memory at once.
absl::Status GraphAllocator::Grow(const Plan& plan) {
  for (size_t id = 0; id < types_.size(); ++id) {
    const size_t need = plan.sizes[id];
    if (need == 0 || buffer_size(id) >= need) continue;
    buffers_[id].reset();
    absl::StatusOr<std::unique_ptr<Buffer>> buffer = types_[id]->Alloc(need);
    if (!buffer.ok()) {
      return absl::Status(
          buffer.status().code(),
          absl::StrCat("[GraphAllocator] buffer id ", id, " of ", need,
                       " bytes: ", buffer.status().message()));
    }
    (*buffer)->set_usage(BufferUsage::kCompute);
    buffers_[id] = *std::move(buffer);
    ++allocations_;
  }
  return absl::OkStatus();
}

absl::Status GraphAllocator::Reserve(const Graph& graph,
                                     absl::Span<const int> node_ids,
                                     absl::Span<const int> leaf_ids) {
  Plan plan;
  TESSERA_RETURN_IF_ERROR(MakePlan(graph, node_ids, leaf_ids, plan));
  return Grow(plan);
}

absl::Status GraphAllocator::Alloc(const Graph& graph,
                                   absl::Span<const int> node_ids,
                                   absl::Span<const int> leaf_ids) {
  Plan plan;
  TESSERA_RETURN_IF_ERROR(MakePlan(graph, node_ids, leaf_ids, plan));
  TESSERA_RETURN_IF_ERROR(Grow(plan));
  // Offsets are multiples of the alignment: buffer bases are aligned.
  for (const PlanData::Placement& p : plan.placements) {
    Buffer& buffer = *buffers_[p.id];
    p.tensor->data = static_cast<char*>(buffer.base()) + p.offset;
    p.tensor->buffer = &buffer;
  }
  for (Tensor* view : plan.views) {
    TESSERA_RETURN_IF_ERROR(InitView(*view));
  }
  return absl::OkStatus();
}

}  // namespace tessera
