#ifndef TESSERA_SCHED_SPLITS_H_
#define TESSERA_SCHED_SPLITS_H_

// Splitting an assigned graph into runs of nodes on one stream, with the
// copies of each run's inputs (the second half of ggml's backend
// scheduler; assignment.h is the first).
//
// The caller's graph is never rewired. The plan works on shadows: one
// scheduler-owned tensor per node and leaf, with the same metadata, whose
// sources point to shadows or, for inputs that come from another stream, to
// the input's copy slot. Shadows are what gets allocated and computed; after
// allocation their placement is written back to the caller's tensors, so
// the caller reads outputs and writes inputs through its own tensors.

#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "sched/assignment.h"

namespace tessera {

// A tensor that one stream reads from elsewhere, with one slot (a tensor in
// that stream's compute memory) per pipeline copy.
struct SplitInput {
  // The shadow read: a node or leaf of the graph, or a view of one.
  Tensor* source = nullptr;
  // The stream that computes `source` in this graph; -1 when nothing does
  // (a pre-allocated constant, or a staged input).
  int source_stream = -1;
  // The stream whose compute memory holds the slots.
  int stream = 0;
  // A graph input (or a view of one) in compute memory: copied by the host
  // at ComputeAsync time, before any work is queued. Otherwise the copy is
  // made on `stream` right before the first split that reads it.
  bool staged = false;
  std::vector<Tensor*> slots;
};

// A run of graph nodes computed on one stream.
struct Split {
  int stream = 0;
  // Node range [begin, end) of the caller's graph; view nodes in the range
  // that belong to other streams are not computed here.
  int begin = 0;
  int end = 0;
  // Inputs copied (not staged) right before this split, as indices into
  // SplitPlan::inputs.
  std::vector<int> inputs;
  // Per copy: the shadows (or their per-copy clones) this stream computes.
  // Filled by FinishSplitPlan.
  std::vector<std::unique_ptr<Graph>> graphs;
};

struct SplitPlan {
  // Owns shadows, slots and clones.
  std::unique_ptr<Context> ctx;
  std::vector<Split> splits;
  std::vector<SplitInput> inputs;
  // What GraphAllocator places: per split, the split's copy slots (copy 0;
  // each names its source as src[0], which keeps the source alive until the
  // copy) then the split's shadows; leafs: the leaf shadows and the slots
  // that must never be reused. The ids are stream indices (buffer ids).
  std::unique_ptr<Graph> alloc_graph;
  std::vector<int> alloc_node_ids;
  std::vector<int> alloc_leaf_ids;
  // The shadow of each of the caller's nodes and leafs, and the caller's
  // tensor of each shadow and clone.
  absl::flat_hash_map<const Tensor*, Tensor*> shadow;
  absl::flat_hash_map<const Tensor*, Tensor*> original;
  // (caller's tensor, shadow) for tensors the allocator places.
  std::vector<std::pair<Tensor*, const Tensor*>> write_back;
  // (clone, shadow): per-copy clones of shadows that read slots or clones;
  // a clone computes into its shadow's memory, reading copy c's slots and
  // clones.
  std::vector<std::pair<Tensor*, const Tensor*>> clones;
  // clone_of[c][shadow] (c >= 1).
  std::vector<absl::flat_hash_map<const Tensor*, Tensor*>> clone_of;
  int n_copied = 0;
  int n_staged = 0;
};

// Cuts `graph`, whose nodes and leafs `assignment` places, into splits and
// finds their inputs:
//  1. Shadow every leaf and node (see the file comment). A shadow keeps its
//     tensor's data when that is pre-allocated (streams.IsPreallocated).
//  2. Walk the nodes that compute; a new split starts whenever the stream
//     changes.
//  3. For each source of each such node:
//     - a graph input in compute memory (a leaf flagged kFlagInput that is
//       not pre-allocated, or a view of one) is staged: a slot per copy on
//       the node's stream, filled from the caller's tensor at ComputeAsync;
//     - a source on the same stream is read in place; so is a pre-allocated
//       constant whose memory the node's device can use;
//     - anything else is copied into a slot per copy on the node's stream,
//       once per (source, stream) and compute, before the first split there
//       that reads it.
//     The node's shadow reads copy 0's slot; per-copy clones read the
//     others. Readers of a clone are cloned too (copy c's clones read copy
//     c's clones), so that each copy's split graphs are closed: a device
//     that follows tensors by identity (a meta device) sees every node's
//     sources computed in the same graph or coming from outside it.
//  4. Build the allocation graph. Slots are flagged kFlagInput (and
//     kFlagOutput with n_copies > 1) where they must never be reused:
//     staged slots always, copied slots when several copies are in flight.
// `assignment` must place every node and leaf (AssignStreams does).
SplitPlan BuildSplitPlan(const Graph& graph, const StreamAssignment& assignment,
                         const StreamSet& streams, int n_copies);

// After the allocation graph was placed: writes placements back to the
// caller's tensors and the clones, and builds each split's per-copy graphs.
void FinishSplitPlan(const Graph& graph, const StreamAssignment& assignment,
                     SplitPlan& plan);

}  // namespace tessera

#endif  // TESSERA_SCHED_SPLITS_H_
