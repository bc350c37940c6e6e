#ifndef TESSERA_SERVER_SESSIONS_REGISTERED_GRAPH_H_
#define TESSERA_SERVER_SESSIONS_REGISTERED_GRAPH_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "backend/device.h"
#include "backend/event.h"
#include "backend/stream.h"
#include "proto/tessera.pb.h"
#include "sched/scheduler.h"
#include "server/decoding/graph_decoder.h"
#include "server/operations/config.h"

namespace tessera::server {

// A graph placed and allocated once (RegisterGraph) and executed many times
// with new inputs (Execute). It owns a stream per device and a Scheduler
// with n_copies in-flight slots, so consecutive executions pipeline over
// the devices. Its compute memory is held until it is destroyed.
//
// Readable outputs: tensors flagged output on the wire or never consumed by
// another node (the graph's results), inputs, leafs with data, and views of
// these; their memory is never reused within the graph.
//
// Thread-safe: Submit calls are serialized.
class RegisteredGraph {
 public:
  // The events that mark the end of one execution's work on each stream,
  // and the build of the streams it ran on. Thread-safe.
  struct Marks {
    uint64_t build = 0;
    std::vector<std::unique_ptr<Event>> events;
    // Blocks until the work is done; its first error, else OK.
    absl::Status Wait() const;
  };

  // One submitted execution whose outputs are being read.
  class Execution {
   public:
    ~Execution();
    // Blocks until the outputs are in the response; returns the first error
    // of the execution. The graph that made it must still exist.
    absl::Status Wait();
    // Whether the work is done (Wait would not block).
    bool IsDone() const;
    // After Wait failed: whether the error came from an earlier execution
    // on the same streams (a failed stream skips the work queued after the
    // failure), so that this one never ran and may be submitted again.
    bool inherited() const { return inherited_; }

   private:
    friend class RegisteredGraph;
    Execution(std::atomic<bool>& graph_failed, std::shared_ptr<Marks> marks,
              std::shared_ptr<const Marks> previous)
        : graph_failed_(graph_failed),
          marks_(std::move(marks)),
          previous_(std::move(previous)) {}
    // Set when the execution fails, so that the graph rebuilds its streams.
    std::atomic<bool>& graph_failed_;
    const std::shared_ptr<Marks> marks_;
    // The execution submitted just before this one (null for the first).
    const std::shared_ptr<const Marks> previous_;
    bool waited_ = false;
    bool inherited_ = false;
  };

  // Who runs the executions' work: stream threads, so that Submit returns
  // before it is done and consecutive executions pipeline over devices; or
  // the thread that calls Submit, on the devices that can
  // (Device::CreateCallerStream), without a hand-off to a stream's thread.
  enum class Runner { kStreams, kCaller };

  // Places and allocates `graph` over `devices` (CPU last) with `n_copies`
  // executions in flight (1 to kMaxCopies). Input tensors start zeroed.
  // Errors: INVALID_ARGUMENT for n_copies out of range; the scheduler's
  // (RESOURCE_EXHAUSTED when compute memory runs out, INVALID_ARGUMENT for
  // a node no device supports); a device's error creating a stream.
  static absl::StatusOr<std::unique_ptr<RegisteredGraph>> Create(
      std::unique_ptr<DecodedGraph> graph, const std::vector<Device*>& devices,
      int n_copies, const Limits& limits, Runner runner);

  // Waits for the work in flight.
  ~RegisteredGraph();
  RegisteredGraph(const RegisteredGraph&) = delete;
  RegisteredGraph& operator=(const RegisteredGraph&) = delete;

  int n_splits() const { return n_splits_; }
  // Compute memory by device name.
  const std::vector<std::pair<std::string, size_t>>& compute_buffer_bytes()
      const {
    return compute_bytes_;
  }
  // Bytes of compute memory the graph holds on all its devices.
  size_t memory_bytes() const { return memory_bytes_; }
  // How long the latest execution took inside Submit, for a graph whose
  // callers run its work (Runner::kCaller; on a device without caller-run
  // streams only the queuing); InfiniteDuration before the first. Zero for
  // a graph run by stream threads.
  absl::Duration caller_run_time() const;
  // Whether a Submit is in progress (or waiting for another).
  bool submitting() const {
    return submitting_.load(std::memory_order_relaxed) > 0;
  }

  // Binds `request.inputs`, queues the computation and the reads of
  // `request.outputs` into `response` (which must stay in place until the
  // execution is waited for) and returns without waiting for them. After
  // a failed execution the streams and the scheduler are rebuilt before the
  // next one. An execution's error is its own: one that fails only
  // because an earlier one left the streams failed is queued again on
  // rebuilt streams here, or reports Execution::inherited() when waited.
  // Errors: as CheckInputs and CheckOutputs (nothing queued); a
  // scheduling error.
  absl::StatusOr<std::unique_ptr<Execution>> Submit(
      const v1::ExecuteRequest& request, const BufferResolver& resolve,
      v1::ExecuteResponse& response);

 private:
  RegisteredGraph(std::unique_ptr<DecodedGraph> graph,
                  std::vector<Device*> devices, int n_copies,
                  const Limits& limits, Runner runner);
  // Makes the streams and the scheduler, allocates the graph, zeroes the
  // inputs.
  absl::Status Build() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Readable(const Tensor& t) const;
  absl::StatusOr<std::unique_ptr<Execution>> SubmitLocked(
      const v1::ExecuteRequest& request, const BufferResolver& resolve,
      v1::ExecuteResponse& response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the inputs, queues the computation and the output reads.
  absl::StatusOr<std::unique_ptr<Execution>> Queue(
      const v1::ExecuteRequest& request, const std::vector<Tensor*>& inputs,
      const std::vector<Tensor*>& outputs, const BufferResolver& resolve,
      v1::ExecuteResponse& response) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::unique_ptr<DecodedGraph> graph_;
  const std::vector<Device*> devices_;
  const int n_copies_;
  const Limits limits_;
  const Runner runner_;
  int n_splits_ = 0;
  std::vector<std::pair<std::string, size_t>> compute_bytes_;
  size_t memory_bytes_ = 0;

  absl::Mutex mu_;
  // Destroyed scheduler first, then streams.
  std::vector<std::unique_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Scheduler> sched_ ABSL_GUARDED_BY(mu_);
  // Whether every device has async streams and events; otherwise each
  // execution completes before Submit returns.
  bool use_events_ = true;
  // caller_run_time() in nanoseconds, -1 before the first execution.
  std::atomic<int64_t> run_nanos_{-1};
  // Submit calls in progress.
  std::atomic<int> submitting_{0};
  // Set by a failed execution; the next Submit rebuilds.
  std::atomic<bool> failed_{false};
  // Counts the builds of the streams.
  uint64_t build_ ABSL_GUARDED_BY(mu_) = 0;
  // The marks of the latest execution submitted.
  std::shared_ptr<const Marks> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_REGISTERED_GRAPH_H_
