#ifndef TESSERA_BACKEND_ALLOC_GRAPH_ALLOCATOR_H_
#define TESSERA_BACKEND_ALLOC_GRAPH_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "backend/buffer.h"
#include "graph/graph.h"

namespace tessera {

// Plans the compute memory of graphs by liveness and places their tensors
// (ggml_gallocr). Buffer id i is memory of `types[i]`; each node and leaf
// goes to the buffer id its caller names (all 0 when none are named).
//
// Planning, for one graph:
//  1. Count each tensor's consumers (nodes that name it as a source, and
//     views of it, which keep it alive as long as they are).
//  2. Place tensors flagged kFlagInput first.
//  3. Walk the nodes in order. Place the sources of a node that have no data
//     yet, then the node itself: a view takes its source's memory; an op
//     that may run in place (see graph/reference.h) takes over src[0]'s
//     memory when src[0] is an unflagged compute tensor of the same size
//     whose only remaining consumer is this node; anything else gets the
//     best-fitting free range, or the end of the buffer.
//  4. After each node, a source whose consumers have all run returns its
//     range to the free list, unless it is flagged kFlagOutput or kFlagInput
//     or already had data (weights and other pre-placed tensors are never
//     touched).
// The high-water mark of each buffer id is the size the graph needs.
//
// Thread-compatible.
class GraphAllocator {
 public:
  explicit GraphAllocator(std::vector<BufferType*> types);
  GraphAllocator(const GraphAllocator&) = delete;
  GraphAllocator& operator=(const GraphAllocator&) = delete;

  // Measures `graph` and grows the buffers to fit it, allocating nothing in
  // the graph. Reserving the largest graph of a shape makes every later
  // Alloc of graphs no larger allocate no memory.
  // Errors: INVALID_ARGUMENT if the id lists do not match the graph or name
  // a buffer id that does not exist; RESOURCE_EXHAUSTED from the buffer type.
  absl::Status Reserve(const Graph& graph, absl::Span<const int> node_ids = {},
                       absl::Span<const int> leaf_ids = {});

  // Plans `graph` and places every tensor that has no data yet. A buffer
  // that is too small is reallocated larger (counted in allocations()).
  // Errors: as Reserve.
  absl::Status Alloc(const Graph& graph, absl::Span<const int> node_ids = {},
                     absl::Span<const int> leaf_ids = {});

  size_t num_buffers() const { return types_.size(); }
  // Current size of buffer `id` (0 before anything was reserved).
  size_t buffer_size(int id) const;
  Buffer* buffer(int id) const { return buffers_[id].get(); }
  // How many device buffers have been allocated so far.
  int64_t allocations() const { return allocations_; }

 private:
  struct Plan;
  absl::Status MakePlan(const Graph& graph, absl::Span<const int> node_ids,
                        absl::Span<const int> leaf_ids, Plan& plan) const;
  absl::Status Grow(const Plan& plan);

  std::vector<BufferType*> types_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  int64_t allocations_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_ALLOC_GRAPH_ALLOCATOR_H_
