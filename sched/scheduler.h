#ifndef TESSERA_SCHED_SCHEDULER_H_
#define TESSERA_SCHED_SCHEDULER_H_

// The multi-device scheduler (ggml_backend_sched): runs one graph over the
// streams of several devices.
//
// It assigns each node to a stream (sched/assignment.h: ops go where their
// pre-allocated data is, assignments spread to neighbours, unsupported ops
// fall back), cuts the graph into splits (runs of nodes on one stream),
// copies each split's inputs from the stream that holds them, and places
// every compute tensor in per-stream compute memory with liveness-based
// reuse (backend/alloc/graph_allocator.h).
//
// Pipeline parallelism: with n_copies > 1, every split input has one slot
// per in-flight graph and every (stream, copy) pair events, so consecutive
// ComputeAsync calls of the same graph overlap: micro-batch k+1 runs on
// device 0 while micro-batch k runs on device 1. At most n_copies graphs are
// in flight; ComputeAsync blocks until micro-batch k - n_copies is done.
//
// Example: a model whose first layers' weights are on gpu0 and the rest on
// the CPU, run over micro-batches.
//
//   std::unique_ptr<Stream> gpu = ...gpu0->CreateStream().value();
//   std::unique_ptr<Stream> cpu = ...cpu0->CreateStream().value();
//   auto sched = Scheduler::Create({gpu.get(), cpu.get()}, {},
//                                  {.n_copies = 4}).value();
//
//   Context ctx;
//   Tensor* x = ctx.NewTensor(Type::kF32, {n_embd, n_tokens}).value();
//   x->flags |= kFlagInput;             // written by the caller
//   Tensor* y = BuildModel(ctx, x);     // graph/ops.h builders
//   y->flags |= kFlagOutput;            // read by the caller
//   Graph graph;
//   graph.Expand(y);
//
//   sched->Reserve(graph);              // size compute memory once
//   sched->AllocGraph(graph);           // assign, split, allocate
//   for (int k = 0; k < n_batches; ++k) {
//     x->buffer->SetTensor(*x, input[k], 0, x->NumBytes());
//     sched->ComputeAsync(graph);       // x may be overwritten on return
//     sched->GetTensorAsync(*y, output[k], 0, y->NumBytes());
//   }
//   sched->Synchronize();               // every output[k] is filled
//
// Every call returns a status; nothing aborts on bad graphs or device
// errors. Not thread-safe: one thread at a time calls a Scheduler.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/event.h"
#include "backend/stream.h"
#include "graph/graph.h"
#include "backend/alloc/graph_allocator.h"
#include "graph/tensor.h"
#include "sched/assignment.h"
#include "sched/splits.h"

namespace tessera {

inline constexpr int kMaxCopies = 4;

struct SchedulerOptions {
  // Most nodes + leafs of a graph.
  size_t graph_size = Graph::kDefaultMaxNodes;
  // Pipeline depth: graphs in flight at once, 1 to kMaxCopies.
  int n_copies = 1;
};

class Scheduler {
 public:
  // `streams`: higher priority first; the last must be on a CPU device (the
  // fallback for ops no other device supports). `buffer_types[i]` is the
  // compute memory of streams[i]; an empty list or a null entry means
  // streams[i]->device().buffer_type(). The streams must outlive the
  // Scheduler, which creates events on their devices where supported.
  // Errors: INVALID_ARGUMENT for no streams, a null or repeated stream, a
  // buffer_types list of another length, a buffer type the stream's device
  // cannot use, a last stream not on a CPU device, n_copies outside
  // [1, kMaxCopies] or graph_size 0; a device's error creating an event.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      std::vector<Stream*> streams, std::vector<BufferType*> buffer_types,
      SchedulerOptions options);

  // Waits for the work in flight.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Plans `measure_graph` as AllocGraph would and grows the compute buffers
  // to fit it, placing nothing and leaving the graph untouched. Reserving
  // the largest graph makes every later AllocGraph of graphs no larger
  // allocate no device memory. Forgets the current allocation.
  // Errors: as AllocGraph.
  absl::Status Reserve(const Graph& measure_graph);

  // Assigns every node to a stream, cuts the graph into splits and places
  // every tensor that has no pre-allocated data in compute memory: nodes,
  // leafs (inputs), and the per-copy slots of split inputs. Sets `data` and
  // `buffer` of the caller's tensors that it places; never changes their
  // sources. Waits for the work in flight first (it re-places memory that
  // work may use).
  //
  // Leafs the caller writes must be flagged kFlagInput (or be pre-allocated)
  // and written after AllocGraph; tensors read after compute should be
  // flagged kFlagOutput, else their memory may be reused within the graph.
  // The placed tensors point into this scheduler's compute memory: a graph
  // allocated here may be allocated here again (its placement is redone) as
  // long as the compute buffers did not grow in between, but not by another
  // scheduler or after this one is destroyed; build it again instead.
  // Errors: RESOURCE_EXHAUSTED for a graph with more nodes + leafs than
  // graph_size; INVALID_ARGUMENT naming a node that no stream's device
  // supports, or a node whose source is not in the graph; the allocator's
  // status (RESOURCE_EXHAUSTED when device memory runs out); a stream's
  // sticky error from earlier work.
  absl::Status AllocGraph(Graph& graph);

  // AllocGraph (if needed), ComputeAsync, Synchronize.
  absl::Status Compute(Graph& graph);

  // Queues the computation of `graph` on the streams and returns. Allocates
  // the graph first when it is not the one last allocated (same nodes and
  // leafs), after Reset, or after SetTensorStream. Steps:
  //  1. Wait until the graph that used this copy's slots (n_copies calls
  //     ago) is done on every stream.
  //  2. Copy the caller's inputs (kFlagInput leafs in compute memory) into
  //     this copy's slots, synchronously: the caller may overwrite its input
  //     tensors as soon as this returns.
  //  3. Per split, in order: make its stream wait until every stream that
  //     copied from this stream's memory has finished copying (the split may
  //     reuse that memory); copy its inputs from the streams that hold them
  //     (Stream::CopyTensorAsync after waiting on the producer's event, then
  //     record a copies-done event; where a device lacks async streams or
  //     events, or the copy is unsupported, both streams are synchronized
  //     and the copy goes through host memory); queue the split's compute;
  //     record this (stream, copy)'s event.
  // With an evaluation callback, each split's nodes are computed in ranges
  // that end at a node the callback asks for, synchronously.
  // Errors: as AllocGraph; a stream's error while queuing; CANCELLED when
  // the evaluation callback stops the compute. After an error the streams
  // are drained.
  absl::Status ComputeAsync(Graph& graph);

  // Blocks until all queued work is done. Returns the first stream error.
  absl::Status Synchronize();

  // Waits for the work in flight and forgets the allocated graph and the
  // pins of SetTensorStream; stream errors stay sticky in the streams.
  void Reset();

  // Pins `node` to `stream` for the next allocation (views still follow
  // their view source; an op the stream's device does not support still
  // moves). Errors: INVALID_ARGUMENT for a null node or a stream that is
  // not one of this scheduler's.
  absl::Status SetTensorStream(Tensor* node, Stream* stream);
  // The stream assigned to `node` by the last allocation (else its pin), or
  // null.
  Stream* GetTensorStream(const Tensor* node) const;

  // Queues a read of `size` bytes at `offset` of `t` (a tensor of the last
  // allocated graph) on the stream that holds it, after the work queued
  // there so far: so the read sees the last computed graph and comes before
  // later graphs overwrite `t`. `data` must stay valid until Synchronize.
  // Errors: FAILED_PRECONDITION when no graph is allocated;
  // INVALID_ARGUMENT for a tensor not in it, or the stream's check of the
  // range.
  absl::Status GetTensorAsync(const Tensor& t, void* data, size_t offset,
                              size_t size);

  // Counts from the last AllocGraph or Reserve.
  int n_splits() const { return n_splits_; }
  int n_copies() const { return options_.n_copies; }
  // Split inputs copied between streams per compute.
  int n_inputs_copied() const { return n_inputs_copied_; }
  // Caller inputs copied into their slots per compute (one per input and
  // stream that reads it).
  int n_inputs_staged() const { return n_inputs_staged_; }
  // Bytes of `stream`'s compute buffer (0 for a stream not in this
  // scheduler or before any allocation).
  size_t compute_buffer_size(const Stream* stream) const;
  // Device buffers the compute memory has allocated so far.
  int64_t compute_buffer_allocations() const { return galloc_->allocations(); }

  // Called for each computed node: first with ask = true (should the
  // compute stop after this node so the callback can observe it?), then,
  // for nodes it asked for, with ask = false once the node is computed
  // (return false to cancel: ComputeAsync returns CANCELLED). `node` is the
  // caller's tensor. An empty function turns observation off.
  void SetEvalCallback(std::function<bool(Tensor* node, bool ask)> callback) {
    eval_callback_ = std::move(callback);
  }

 private:
  Scheduler(StreamSet streams, SchedulerOptions options,
            std::unique_ptr<GraphAllocator> galloc);

  // Assignment and splits of `graph` with the current compute buffers.
  absl::StatusOr<SplitPlan> MakePlan(const Graph& graph,
                                     StreamAssignment& assignment);
  bool IsAllocated(const Graph& graph) const;
  bool EventsUsable(int stream) const { return !done_[stream].empty(); }
  // Step 1 of ComputeAsync.
  absl::Status WaitForCopy(int copy);
  // Synchronous copy of `src` into `dst` through the buffers.
  absl::Status HostCopy(const Tensor& src, Tensor& dst);
  // Copies plan_->inputs[index] into its slot for `copy`.
  absl::Status CopyInput(int index, int copy, bool& queued);
  absl::Status RunSplit(const Split& split, int copy);
  absl::Status ComputeObserved(const Split& split, int copy);
  // Synchronizes every stream, ignoring errors (they stay sticky).
  void Drain();

  // Constant after construction.
  StreamSet streams_;
  const SchedulerOptions options_;
  // done_[s][c] is recorded after each split of stream s for copy c;
  // copied_[s][c] after the input copies of such a split. Empty for a
  // stream whose device lacks async streams or events.
  std::vector<std::vector<std::unique_ptr<Event>>> done_;
  std::vector<std::vector<std::unique_ptr<Event>>> copied_;

  // State below changes with each call (the class is not thread-safe).
  std::unique_ptr<GraphAllocator> galloc_;
  StreamAssignment pins_;
  StreamAssignment assignment_;
  std::unique_ptr<SplitPlan> plan_;
  // The nodes and leafs `plan_` was made for.
  std::vector<Tensor*> plan_nodes_;
  std::vector<Tensor*> plan_leafs_;
  bool needs_alloc_ = true;
  int cur_copy_ = 0;
  // Per stream: (reader stream, copy) whose copies read this stream's
  // memory and have not yet been waited for by it.
  std::vector<std::vector<std::pair<int, int>>> pending_readers_;
  std::vector<uint8_t> staging_;
  // Per input of plan_: its stream has refused to copy it in stream order
  // (UNIMPLEMENTED, e.g. a GPU from pageable host memory), so the host
  // copies it from then on, with no event wait queued for the refused copy.
  std::vector<bool> host_copied_;
  int n_splits_ = 0;
  int n_inputs_copied_ = 0;
  int n_inputs_staged_ = 0;
  std::function<bool(Tensor*, bool)> eval_callback_;
};

}  // namespace tessera

#endif  // TESSERA_SCHED_SCHEDULER_H_
