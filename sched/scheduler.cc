#include "sched/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backend/device.h"

namespace tessera {
namespace {

// `status` with `context` in front of its message, same code.
absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    std::vector<Stream*> streams, std::vector<BufferType*> buffer_types,
    SchedulerOptions options) {
  constexpr absl::string_view kWhere = "[Scheduler::Create]";
  if (streams.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, " no streams"));
  }
  absl::flat_hash_set<const Stream*> seen;
  for (size_t i = 0; i < streams.size(); ++i) {
    if (streams[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, " stream ", i, " is null"));
    }
    if (!seen.insert(streams[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, " stream ", i, " is listed twice"));
    }
  }
  if (!buffer_types.empty() && buffer_types.size() != streams.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, " ", buffer_types.size(), " buffer types for ",
                     streams.size(), " streams"));
  }
  buffer_types.resize(streams.size(), nullptr);
  for (size_t i = 0; i < streams.size(); ++i) {
    Device& device = streams[i]->device();
    if (buffer_types[i] == nullptr) buffer_types[i] = &device.buffer_type();
    if (!device.SupportsBufferType(*buffer_types[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, " device '", device.name(), "' of stream ", i,
                       " cannot compute in buffer type '",
                       std::string(buffer_types[i]->name()), "'"));
    }
  }
  Device& last = streams.back()->device();
  if (last.Props().type != DeviceType::kCpu) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhere, " the last stream must be on a CPU device, not '", last.name(),
        "' (", std::string(DeviceTypeName(last.Props().type)), ")"));
  }
  if (options.n_copies < 1 || options.n_copies > kMaxCopies) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, " n_copies ", options.n_copies, " is not in [1, ",
                     kMaxCopies, "]"));
  }
  if (options.graph_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, " graph_size is 0"));
  }

  auto galloc = std::make_unique<GraphAllocator>(buffer_types);
  std::unique_ptr<Scheduler> sched(
      new Scheduler(StreamSet(std::move(streams), std::move(buffer_types)),
                    options, std::move(galloc)));
  const int n_streams = sched->streams_.size();
  sched->done_.resize(n_streams);
  sched->copied_.resize(n_streams);
  for (int s = 0; s < n_streams; ++s) {
    Device& device = sched->streams_.device(s);
    DeviceCaps caps = device.Props().caps;
    if (!caps.async || !caps.events) continue;
    for (int c = 0; c < options.n_copies; ++c) {
      for (auto* events : {&sched->done_[s], &sched->copied_[s]}) {
        absl::StatusOr<std::unique_ptr<Event>> event = device.CreateEvent();
        if (!event.ok()) {
          return Annotate(event.status(), absl::StrCat(kWhere, " event on '",
                                                       device.name(), "'"));
        }
        events->push_back(*std::move(event));
      }
    }
  }
  return sched;
}

Scheduler::Scheduler(StreamSet streams, SchedulerOptions options,
                     std::unique_ptr<GraphAllocator> galloc)
    : streams_(std::move(streams)),
      options_(options),
      galloc_(std::move(galloc)),
      pending_readers_(streams_.size()) {}

Scheduler::~Scheduler() { Drain(); }

void Scheduler::Drain() {
  for (int s = 0; s < streams_.size(); ++s) {
    streams_.stream(s).Synchronize().IgnoreError();
    pending_readers_[s].clear();
  }
}

absl::Status Scheduler::Synchronize() {
  absl::Status first;
  for (int s = 0; s < streams_.size(); ++s) {
    absl::Status status = streams_.stream(s).Synchronize();
    if (first.ok() && !status.ok()) {
      first = Annotate(status, absl::StrCat("[Scheduler::Synchronize] device '",
                                            streams_.device(s).name(), "'"));
    }
    pending_readers_[s].clear();
  }
  return first;
}

void Scheduler::Reset() {
  Drain();
  plan_.reset();
  plan_nodes_.clear();
  plan_leafs_.clear();
  assignment_.clear();
  pins_.clear();
  needs_alloc_ = true;
}

absl::Status Scheduler::SetTensorStream(Tensor* node, Stream* stream) {
  int index = streams_.IndexOf(stream);
  if (node == nullptr || index < 0) {
    return absl::InvalidArgumentError(
        node == nullptr
            ? "[Scheduler::SetTensorStream] node is null"
            : "[Scheduler::SetTensorStream] the stream is not one of the "
              "scheduler's");
  }
  pins_[node] = index;
  needs_alloc_ = true;
  return absl::OkStatus();
}

Stream* Scheduler::GetTensorStream(const Tensor* node) const {
  for (const StreamAssignment* ids : {&assignment_, &pins_}) {
    auto it = ids->find(node);
    if (it != ids->end()) return &streams_.stream(it->second);
  }
  return nullptr;
}

size_t Scheduler::compute_buffer_size(const Stream* stream) const {
  int index = streams_.IndexOf(stream);
  return index < 0 ? 0 : galloc_->buffer_size(index);
}

absl::StatusOr<SplitPlan> Scheduler::MakePlan(const Graph& graph,
                                              StreamAssignment& assignment) {
  const size_t size = graph.nodes().size() + graph.leafs().size();
  if (size > options_.graph_size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("[Scheduler] the graph has ", graph.nodes().size(),
                     " nodes and ", graph.leafs().size(),
                     " leafs, more than graph_size ", options_.graph_size));
  }
  std::vector<const Buffer*> buffers;
  for (int s = 0; s < streams_.size(); ++s) {
    buffers.push_back(galloc_->buffer(s));
  }
  streams_.set_compute_buffers(std::move(buffers));
  absl::StatusOr<StreamAssignment> ids = AssignStreams(graph, pins_, streams_);
  if (!ids.ok()) return ids.status();
  assignment = *std::move(ids);
  SplitPlan plan =
      BuildSplitPlan(graph, assignment, streams_, options_.n_copies);
  n_splits_ = static_cast<int>(plan.splits.size());
  n_inputs_copied_ = plan.n_copied;
  n_inputs_staged_ = plan.n_staged;
  return plan;
}

absl::Status Scheduler::Reserve(const Graph& measure_graph) {
  if (absl::Status s = Synchronize(); !s.ok()) return s;
  plan_.reset();
  assignment_.clear();
  needs_alloc_ = true;
  StreamAssignment assignment;
  absl::StatusOr<SplitPlan> plan = MakePlan(measure_graph, assignment);
  if (!plan.ok()) return Annotate(plan.status(), "[Scheduler::Reserve]");
  return Annotate(galloc_->Reserve(*plan->alloc_graph, plan->alloc_node_ids,
                                   plan->alloc_leaf_ids),
                  "[Scheduler::Reserve]");
}

absl::Status Scheduler::AllocGraph(Graph& graph) {
  if (absl::Status s = Synchronize(); !s.ok()) return s;
  plan_.reset();
  needs_alloc_ = true;
  absl::StatusOr<SplitPlan> plan = MakePlan(graph, assignment_);
  if (!plan.ok()) return Annotate(plan.status(), "[Scheduler::AllocGraph]");
  if (absl::Status s = galloc_->Alloc(*plan->alloc_graph, plan->alloc_node_ids,
                                      plan->alloc_leaf_ids);
      !s.ok()) {
    return Annotate(s, "[Scheduler::AllocGraph]");
  }
  for (int s = 0; s < streams_.size(); ++s) {
    if (Buffer* buffer = galloc_->buffer(s)) {
      buffer->set_usage(BufferUsage::kCompute);
    }
  }
  FinishSplitPlan(graph, assignment_, *plan);
  plan_ = std::make_unique<SplitPlan>(*std::move(plan));
  host_copied_.assign(plan_->inputs.size(), false);
  plan_nodes_.assign(graph.nodes().begin(), graph.nodes().end());
  plan_leafs_.assign(graph.leafs().begin(), graph.leafs().end());
  needs_alloc_ = false;
  return absl::OkStatus();
}

bool Scheduler::IsAllocated(const Graph& graph) const {
  return !needs_alloc_ && plan_ != nullptr &&
         std::equal(plan_nodes_.begin(), plan_nodes_.end(),
                    graph.nodes().begin(), graph.nodes().end()) &&
         std::equal(plan_leafs_.begin(), plan_leafs_.end(),
                    graph.leafs().begin(), graph.leafs().end());
}

absl::Status Scheduler::Compute(Graph& graph) {
  if (absl::Status s = ComputeAsync(graph); !s.ok()) return s;
  return Synchronize();
}

absl::Status Scheduler::WaitForCopy(int copy) {
  for (int s = 0; s < streams_.size(); ++s) {
    absl::Status status = EventsUsable(s) ? done_[s][copy]->Synchronize()
                                          : streams_.stream(s).Synchronize();
    if (!status.ok()) {
      return Annotate(status,
                      absl::StrCat("device '", streams_.device(s).name(), "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status Scheduler::HostCopy(const Tensor& src, Tensor& dst) {
  absl::StatusOr<bool> direct = dst.buffer->CopyFrom(src, dst);
  if (!direct.ok()) return direct.status();
  if (*direct) return absl::OkStatus();
  const size_t size = src.NumBytes();
  staging_.resize(size);
  if (absl::Status s = src.buffer->GetTensor(src, staging_.data(), 0, size);
      !s.ok()) {
    return s;
  }
  return dst.buffer->SetTensor(dst, staging_.data(), 0, size);
}

absl::Status Scheduler::CopyInput(int index, int copy, bool& queued) {
  const SplitInput& input = plan_->inputs[index];
  const int d = input.stream;
  const int p = input.source_stream;
  Stream& stream = streams_.stream(d);
  Tensor& slot = *input.slots[copy];
  if (!host_copied_[index] && EventsUsable(d) &&
      (p < 0 || EventsUsable(p))) {
    if (p >= 0) {
      if (absl::Status s = stream.WaitEvent(*done_[p][copy]); !s.ok()) {
        return s;
      }
    }
    absl::Status status = stream.CopyTensorAsync(*input.source, slot);
    if (status.ok()) {
      queued = true;
      if (p >= 0) {
        auto& readers = pending_readers_[p];
        if (std::find(readers.begin(), readers.end(),
                      std::make_pair(d, copy)) == readers.end()) {
          readers.emplace_back(d, copy);
        }
      }
      return absl::OkStatus();
    }
    if (!absl::IsUnimplemented(status)) return status;
    host_copied_[index] = true;
  }
  // Synchronous fallback: the source is complete and the slot unused once
  // both streams are idle.
  if (p >= 0) {
    if (absl::Status s = streams_.stream(p).Synchronize(); !s.ok()) return s;
  }
  if (absl::Status s = stream.Synchronize(); !s.ok()) return s;
  return HostCopy(*input.source, slot);
}

absl::Status Scheduler::RunSplit(const Split& split, int copy) {
  const int d = split.stream;
  Stream& stream = streams_.stream(d);
  // Copies that other streams queued from this stream's memory must be done
  // before this split writes it: its input slots and its nodes may reuse
  // the ranges those copies read.
  for (const auto& [reader, reader_copy] : pending_readers_[d]) {
    if (absl::Status s = stream.WaitEvent(*copied_[reader][reader_copy]);
        !s.ok()) {
      return s;
    }
  }
  pending_readers_[d].clear();
  bool queued = false;
  for (int index : split.inputs) {
    const SplitInput& input = plan_->inputs[index];
    if (absl::Status s = CopyInput(index, copy, queued); !s.ok()) {
      return Annotate(
          s, absl::StrCat("copying '", input.source->name, "' to device '",
                          streams_.device(d).name(), "'"));
    }
  }
  if (queued) {
    if (absl::Status s = stream.RecordEvent(*copied_[d][copy]); !s.ok()) {
      return s;
    }
  }
  absl::Status status = eval_callback_
                            ? ComputeObserved(split, copy)
                            : stream.ComputeAsync(*split.graphs[copy]);
  if (!status.ok()) return status;
  if (EventsUsable(d)) return stream.RecordEvent(*done_[d][copy]);
  return absl::OkStatus();
}

absl::Status Scheduler::ComputeObserved(const Split& split, int copy) {
  Stream& stream = streams_.stream(split.stream);
  auto nodes = split.graphs[copy]->nodes();
  auto original = [&](Tensor* t) { return plan_->original.at(t); };
  for (size_t j0 = 0; j0 < nodes.size();) {
    size_t j1 = j0;
    bool need = eval_callback_(original(nodes[j1]), true);
    while (!need && j1 + 1 < nodes.size()) {
      need = eval_callback_(original(nodes[++j1]), true);
    }
    Graph range(j1 - j0 + 1);
    for (size_t j = j0; j <= j1; ++j) range.AddNode(nodes[j]);
    if (absl::Status s = stream.ComputeAsync(range); !s.ok()) return s;
    if (absl::Status s = stream.Synchronize(); !s.ok()) return s;
    if (need && !eval_callback_(original(nodes[j1]), false)) {
      return absl::CancelledError(absl::StrCat(
          "the evaluation callback cancelled the compute after node '",
          nodes[j1]->name, "'"));
    }
    j0 = j1 + 1;
  }
  return absl::OkStatus();
}

absl::Status Scheduler::ComputeAsync(Graph& graph) {
  constexpr absl::string_view kWhere = "[Scheduler::ComputeAsync]";
  if (!IsAllocated(graph)) {
    if (absl::Status s = AllocGraph(graph); !s.ok()) return s;
  }
  const int copy = cur_copy_;
  absl::Status status = WaitForCopy(copy);
  for (size_t i = 0; status.ok() && i < plan_->inputs.size(); ++i) {
    const SplitInput& input = plan_->inputs[i];
    if (!input.staged) continue;
    status = Annotate(HostCopy(*input.source, *input.slots[copy]),
                      absl::StrCat("input '", input.source->name, "'"));
  }
  for (size_t i = 0; status.ok() && i < plan_->splits.size(); ++i) {
    const Split& split = plan_->splits[i];
    status = Annotate(RunSplit(split, copy),
                      absl::StrCat("split ", i, " on device '",
                                   streams_.device(split.stream).name(), "'"));
  }
  if (!status.ok()) {
    Drain();
    return Annotate(status, kWhere);
  }
  cur_copy_ = (copy + 1) % options_.n_copies;
  return absl::OkStatus();
}

absl::Status Scheduler::GetTensorAsync(const Tensor& t, void* data,
                                       size_t offset, size_t size) {
  constexpr absl::string_view kWhere = "[Scheduler::GetTensorAsync]";
  if (plan_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kWhere, " no graph is allocated"));
  }
  auto it = assignment_.find(&t);
  if (it == assignment_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, " '", t.name, "' is not in the allocated graph"));
  }
  return Annotate(
      streams_.stream(it->second).GetTensorAsync(t, data, offset, size),
      kWhere);
}

}  // namespace tessera
