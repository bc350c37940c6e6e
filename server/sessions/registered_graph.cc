#include "server/sessions/registered_graph.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/decoding/graph_io.h"

namespace tessera::server {
namespace {

const Tensor& Root(const Tensor& t) {
  return t.view_src != nullptr ? *t.view_src : t;
}

}  // namespace

RegisteredGraph::Execution::~Execution() {
  if (!waited_) (void)Wait();
}

absl::Status RegisteredGraph::Marks::Wait() const {
  absl::Status status;
  for (const std::unique_ptr<Event>& event : events) {
    absl::Status s = event->Synchronize();
    if (status.ok()) status = s;
  }
  return status;
}

bool RegisteredGraph::Execution::IsDone() const {
  for (const std::unique_ptr<Event>& event : marks_->events) {
    if (!event->IsDone()) return false;
  }
  return true;
}

// The streams run in order, so once this execution's marks are done so are
// the previous execution's: if that one failed on the same streams, this
// one's error is the sticky error it left.
absl::Status RegisteredGraph::Execution::Wait() {
  waited_ = true;
  absl::Status status = marks_->Wait();
  if (!status.ok()) {
    graph_failed_ = true;
    inherited_ = previous_ != nullptr && previous_->build == marks_->build &&
                 !previous_->Wait().ok();
  }
  return status;
}

RegisteredGraph::RegisteredGraph(std::unique_ptr<DecodedGraph> graph,
                                 std::vector<Device*> devices, int n_copies,
                                 const Limits& limits, Runner runner)
    : graph_(std::move(graph)),
      devices_(std::move(devices)),
      n_copies_(n_copies),
      limits_(limits),
      runner_(runner) {
  for (Device* device : devices_) {
    const DeviceCaps caps = device->Props().caps;
    use_events_ = use_events_ && caps.async && caps.events;
  }
}

RegisteredGraph::~RegisteredGraph() {
  absl::MutexLock lock(&mu_);
  if (sched_ != nullptr) (void)sched_->Synchronize();
  sched_.reset();
  streams_.clear();
}

// 1. Flag the results (nodes no other node reads) as outputs, and the
//    sources of output views.
// 2. Build: streams, scheduler, allocation, zeroed inputs.
// 3. Record the compute memory per device.
absl::StatusOr<std::unique_ptr<RegisteredGraph>> RegisteredGraph::Create(
    std::unique_ptr<DecodedGraph> graph, const std::vector<Device*>& devices,
    int n_copies, const Limits& limits, Runner runner) {
  if (n_copies < 1 || n_copies > kMaxCopies) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[RegisterGraph] n_copies ", n_copies, " is not in [1, ", kMaxCopies,
        "]"));
  }
  absl::flat_hash_set<const Tensor*> consumed;
  for (const Tensor* node : graph->graph->nodes()) {
    for (const Tensor* src : node->src) consumed.insert(src);
    consumed.insert(node->view_src);
  }
  for (Tensor* node : graph->graph->nodes()) {
    if (!consumed.contains(node)) node->flags |= kFlagOutput;
  }
  // A view's memory is its source's: keep that too.
  for (Tensor* node : graph->graph->nodes()) {
    if (node->HasFlag(kFlagOutput) && node->view_src != nullptr) {
      node->view_src->flags |= kFlagOutput;
    }
  }
  std::unique_ptr<RegisteredGraph> registered(
      new RegisteredGraph(std::move(graph), devices, n_copies, limits, runner));
  absl::MutexLock lock(&registered->mu_);
  TESSERA_RETURN_IF_ERROR(registered->Build());
  registered->n_splits_ = registered->sched_->n_splits();
  for (const std::unique_ptr<Stream>& stream : registered->streams_) {
    const size_t bytes = registered->sched_->compute_buffer_size(stream.get());
    registered->compute_bytes_.emplace_back(stream->device().name(), bytes);
    registered->memory_bytes_ += bytes;
  }
  return registered;
}

// Tensors the previous scheduler placed lose their placement first (only
// the leafs with data from the wire keep theirs).
absl::Status RegisteredGraph::Build() {
  if (sched_ != nullptr) (void)sched_->Synchronize();
  sched_.reset();
  streams_.clear();
  absl::flat_hash_set<const Buffer*> wire_buffers;
  for (const std::shared_ptr<Buffer>& buffer : graph_->buffers) {
    wire_buffers.insert(buffer.get());
  }
  for (auto span : {graph_->graph->nodes(), graph_->graph->leafs()}) {
    for (Tensor* t : span) {
      if (!wire_buffers.contains(t->buffer)) {
        t->buffer = nullptr;
        t->data = nullptr;
      }
    }
  }

  std::vector<Stream*> streams;
  for (Device* device : devices_) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                             runner_ == Runner::kCaller
                                 ? device->CreateCallerStream()
                                 : device->CreateStream());
    streams.push_back(stream.get());
    streams_.push_back(std::move(stream));
  }
  TESSERA_ASSIGN_OR_RETURN(
      sched_, Scheduler::Create(streams, {},
                                {.graph_size = limits_.max_graph_nodes,
                                 .n_copies = n_copies_}));
  TESSERA_RETURN_IF_ERROR(sched_->AllocGraph(*graph_->graph));
  for (Tensor* input : graph_->inputs) {
    TESSERA_RETURN_IF_ERROR(
        input->buffer->MemsetTensor(*input, 0, 0, input->NumBytes()));
  }
  ++build_;
  failed_ = false;
  return absl::OkStatus();
}

absl::Status RegisteredGraph::Readable(const Tensor& t) const {
  const Tensor& root = Root(t);
  const bool kept = t.HasFlag(kFlagOutput) || root.HasFlag(kFlagOutput) ||
                    root.HasFlag(kFlagInput) || root.op == Op::kNone;
  if (kept) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor \"", t.name, "\" ", Describe(t),
      " is an intermediate of the registered graph whose memory is reused; "
      "flag it output (2) when registering"));
}

absl::StatusOr<std::unique_ptr<RegisteredGraph::Execution>>
RegisteredGraph::Submit(const v1::ExecuteRequest& request,
                        const BufferResolver& resolve,
                        v1::ExecuteResponse& response) {
  submitting_.fetch_add(1, std::memory_order_relaxed);
  absl::ReleasableMutexLock lock(&mu_);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Execution>> execution =
      SubmitLocked(request, resolve, response);
  if (!execution.ok()) response.clear_outputs();
  if (execution.ok() && runner_ == Runner::kCaller) {
    run_nanos_.store(absl::ToInt64Nanoseconds(absl::Now() - start),
                     std::memory_order_relaxed);
  }
  lock.Release();
  submitting_.fetch_sub(1, std::memory_order_relaxed);
  return execution;
}

absl::Duration RegisteredGraph::caller_run_time() const {
  if (runner_ != Runner::kCaller) return absl::ZeroDuration();
  const int64_t nanos = run_nanos_.load(std::memory_order_relaxed);
  return nanos < 0 ? absl::InfiniteDuration() : absl::Nanoseconds(nanos);
}

// 1. Check inputs and outputs (nothing queued on error).
// 2. Rebuild after a failure (the streams hold a sticky error).
// 3. Queue the execution. Queuing fails, without being this execution's
//    fault, when an earlier execution left the streams failed (it waits for
//    that one's copy slot): then rebuild and queue it once more.
absl::StatusOr<std::unique_ptr<RegisteredGraph::Execution>>
RegisteredGraph::SubmitLocked(const v1::ExecuteRequest& request,
                              const BufferResolver& resolve,
                              v1::ExecuteResponse& response) {
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Tensor*> inputs,
      CheckInputs(*graph_, request.inputs(), resolve, /*require_all=*/false,
                  limits_.max_chunk_bytes));
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Tensor*> outputs,
      CheckOutputs(
          *graph_, request.outputs(),
          [this](const Tensor& t) { return Readable(t); },
          limits_.max_message_bytes / 2));
  if (failed_) TESSERA_RETURN_IF_ERROR(Build());
  absl::StatusOr<std::unique_ptr<Execution>> execution =
      Queue(request, inputs, outputs, resolve, response);
  if (!execution.ok() && last_ != nullptr && last_->build == build_ &&
      !last_->Wait().ok()) {
    response.clear_outputs();
    TESSERA_RETURN_IF_ERROR(Build());
    execution = Queue(request, inputs, outputs, resolve, response);
  }
  return execution;
}

// 1. Write the inputs; ComputeAsync stages them into this copy's slots.
// 2. Queue the output reads on the streams holding them, then record an
//    event per stream: the execution is done when every event is.
absl::StatusOr<std::unique_ptr<RegisteredGraph::Execution>>
RegisteredGraph::Queue(const v1::ExecuteRequest& request,
                       const std::vector<Tensor*>& inputs,
                       const std::vector<Tensor*>& outputs,
                       const BufferResolver& resolve,
                       v1::ExecuteResponse& response) {
  auto marks = std::make_shared<Marks>();
  marks->build = build_;
  absl::Status status = WriteInputs(request.inputs(), inputs, resolve);
  if (status.ok()) status = sched_->ComputeAsync(*graph_->graph);
  if (status.ok()) {
    status = ReadOutputs(*sched_, request.outputs(), outputs,
                         *response.mutable_outputs());
  }
  if (status.ok() && use_events_) {
    for (const std::unique_ptr<Stream>& stream : streams_) {
      absl::StatusOr<std::unique_ptr<Event>> event =
          stream->device().CreateEvent();
      if (!event.ok()) {
        status = event.status();
        break;
      }
      status = stream->RecordEvent(**event);
      marks->events.push_back(*std::move(event));
      if (!status.ok()) break;
    }
  }
  if (status.ok() && !use_events_) status = sched_->Synchronize();
  if (!status.ok()) {
    // Wait for whatever was queued (reads into `response` included).
    (void)sched_->Synchronize();
    failed_ = true;
    return status;
  }
  std::unique_ptr<Execution> execution(new Execution(failed_, marks, last_));
  last_ = std::move(marks);
  return execution;
}

}  // namespace tessera::server
