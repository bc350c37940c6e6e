#ifndef TESSERA_GRAPH_GRAPH_H_
#define TESSERA_GRAPH_GRAPH_H_

#include <cstddef>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "graph/tensor.h"

namespace tessera {

// A compute graph: `nodes` (tensors produced by an op, in an order where
// every source comes first) and `leafs` (tensors with Op::kNone: weights and
// inputs). Does not own tensors. Not thread-safe.
class Graph {
 public:
  static constexpr size_t kDefaultMaxNodes = 8192;

  explicit Graph(size_t max_nodes = kDefaultMaxNodes) : max_nodes_(max_nodes) {}

  // Adds `t` and, first, everything it depends on (sources and view
  // sources), depth first in source order, each tensor once.
  // Errors: RESOURCE_EXHAUSTED when nodes + leafs would exceed max_nodes;
  // INVALID_ARGUMENT for a cycle.
  absl::Status Expand(Tensor* t);

  // Appends a node whose sources are already in the graph, with no checks
  // (used to build sub-graphs from splits).
  void AddNode(Tensor* t) { nodes_.push_back(t); }
  void AddLeaf(Tensor* t) { leafs_.push_back(t); }

  absl::Span<Tensor* const> nodes() const { return nodes_; }
  absl::Span<Tensor* const> leafs() const { return leafs_; }
  size_t max_nodes() const { return max_nodes_; }
  void Clear();

 private:
  size_t max_nodes_;
  std::vector<Tensor*> nodes_;
  std::vector<Tensor*> leafs_;
  absl::flat_hash_set<const Tensor*> visited_;
};

// Whether `op` only reinterprets its source's memory (VIEW, RESHAPE, PERMUTE,
// TRANSPOSE) and so does no work at compute time. NONE is also no work.
bool IsViewOp(Op op);

}  // namespace tessera

#endif  // TESSERA_GRAPH_GRAPH_H_
