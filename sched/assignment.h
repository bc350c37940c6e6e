#ifndef TESSERA_SCHED_ASSIGNMENT_H_
#define TESSERA_SCHED_ASSIGNMENT_H_

// Stream assignment: which stream computes each node of a graph (the first
// half of ggml's backend scheduler; splits.h is the second half).

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/device.h"
#include "backend/stream.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace tessera {

// The streams of a scheduler in priority order (index 0 first; the last one
// is the CPU fallback), the buffer type of each stream's compute memory, and
// the compute buffers currently placed in that memory. Tensors whose data
// lies in a compute buffer were placed by the scheduler and count as
// unallocated when a graph is planned again; every other tensor with data
// is pre-allocated (weights, caches, caller-owned inputs).
// Thread-compatible.
class StreamSet {
 public:
  // `streams` and `compute_types` have the same non-zero length.
  StreamSet(std::vector<Stream*> streams,
            std::vector<BufferType*> compute_types);

  int size() const { return static_cast<int>(streams_.size()); }
  int fallback() const { return size() - 1; }
  Stream& stream(int i) const { return *streams_[i]; }
  Device& device(int i) const { return streams_[i]->device(); }
  BufferType& compute_type(int i) const { return *compute_types_[i]; }
  // Index of `stream`, or -1 when it is not one of these.
  int IndexOf(const Stream* stream) const;

  void set_compute_buffers(std::vector<const Buffer*> buffers) {
    compute_buffers_ = std::move(buffers);
  }
  bool IsComputeBuffer(const Buffer* buffer) const;
  // Whether `t` has data that the scheduler did not place.
  bool IsPreallocated(const Tensor& t) const {
    return t.data != nullptr && !IsComputeBuffer(t.buffer);
  }
  // The buffer of the memory `t` aliases (its view root's) when that memory
  // is pre-allocated; null otherwise.
  Buffer* PreallocatedBuffer(const Tensor& t) const;
  // Whether stream `i` computes `node`: ops that do no work (NONE and views)
  // run anywhere; every other op asks the device.
  bool Supports(int i, const Tensor& node) const;

 private:
  std::vector<Stream*> streams_;
  std::vector<BufferType*> compute_types_;
  std::vector<const Buffer*> compute_buffers_;
};

// The tensor whose memory `t` aliases: view sources followed to the end
// (`t` itself when it is not a view).
const Tensor& ViewRoot(const Tensor& t);
// NONE and the view ops: nothing is computed.
bool DoesNoWork(const Tensor& t);
// The tensor whose value `t` shows: views that do no work followed to what
// they were made from (src[0], else the view source) until a tensor without
// a view source (a leaf or a computed node) or one that computes into its
// view source (e.g. the SET_ROWS a view of a KV cache reads, although the
// view's source is the cache itself).
const Tensor& ViewBase(const Tensor& t);
// Whether `t`'s value is not computed by the graph: a leaf, or a chain of
// views ending in one.
bool IsConstant(const Tensor& t);

// Stream index of each tensor.
using StreamAssignment = absl::flat_hash_map<const Tensor*, int>;

// Assigns every node and leaf of `graph` to a stream of `streams`, starting
// from `pins` (the caller's choices, which are kept, except that views
// follow their view source and an op the pinned device does not support
// moves). The passes, in order, are documented in assignment.cc.
// Errors: INVALID_ARGUMENT naming a node that no stream's device computes,
// a node that writes into pre-allocated memory that the device computing it
// cannot use, or a source that is not in the graph.
absl::StatusOr<StreamAssignment> AssignStreams(const Graph& graph,
                                               const StreamAssignment& pins,
                                               const StreamSet& streams);

}  // namespace tessera

#endif  // TESSERA_SCHED_ASSIGNMENT_H_
