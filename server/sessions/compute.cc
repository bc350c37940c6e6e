#include "server/sessions/compute.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sched/scheduler.h"
#include "server/decoding/graph_decoder.h"
#include "server/decoding/graph_io.h"
#include "server/sessions/registered_graph.h"

namespace tessera::server {
namespace {

absl::Status Annotated(const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("[Compute] ", status.message()));
}

absl::Status Run(Session& session, const std::vector<Device*>& devices,
                 const Limits& limits, const v1::ComputeRequest& request,
                 v1::ComputeResponse& response) {
  const BufferResolver resolve = [&session](uint64_t handle) {
    return session.FindBuffer(handle);
  };
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<DecodedGraph> graph,
      DecodeGraph(request.graph(), resolve,
                  {.max_tensors = limits.max_graph_nodes}));
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Tensor*> inputs,
      CheckInputs(*graph, request.inputs(), resolve, /*require_all=*/true,
                  limits.max_chunk_bytes));
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Tensor*> outputs,
      CheckOutputs(
          *graph, request.outputs(),
          [](const Tensor&) { return absl::OkStatus(); },
          limits.max_message_bytes / 2));
  // A view's memory is its source's: keep that too.
  for (Tensor* t : outputs) {
    t->flags |= kFlagOutput;
    if (t->view_src != nullptr) t->view_src->flags |= kFlagOutput;
  }

  absl::MutexLock lock(&session.compute_mutex());
  std::vector<Stream*> streams;
  for (Device* device : devices) {
    TESSERA_ASSIGN_OR_RETURN(Stream * stream, session.ComputeStream(*device));
    streams.push_back(stream);
  }
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<Scheduler> sched,
      Scheduler::Create(streams, {},
                        {.graph_size = limits.max_graph_nodes, .n_copies = 1}));
  absl::Status status = sched->AllocGraph(*graph->graph);
  // The compute memory is the session's while the call runs.
  MemoryCharge compute_memory;
  if (status.ok()) {
    uint64_t bytes = 0;
    for (Stream* stream : streams) bytes += sched->compute_buffer_size(stream);
    absl::StatusOr<MemoryCharge> charge =
        session.Reserve(bytes, "compute memory");
    if (charge.ok()) {
      compute_memory = *std::move(charge);
    } else {
      status = charge.status();
    }
  }
  if (status.ok()) status = WriteInputs(request.inputs(), inputs, resolve);
  if (status.ok()) status = sched->ComputeAsync(*graph->graph);
  if (status.ok()) {
    status = ReadOutputs(*sched, request.outputs(), outputs,
                         *response.mutable_outputs());
  }
  if (absl::Status s = sched->Synchronize(); status.ok()) status = s;
  if (!status.ok()) {
    response.clear_outputs();
    sched.reset();
    session.ResetComputeStreams();
  }
  return status;
}

}  // namespace

absl::Status RunCompute(Session& session, const std::vector<Device*>& devices,
                        const Limits& limits,
                        const v1::ComputeRequest& request,
                        v1::ComputeResponse& response) {
  return Annotated(Run(session, devices, limits, request, response));
}

absl::Status RunRegisterGraph(Session& session,
                              const std::vector<Device*>& devices,
                              const Limits& limits,
                              const v1::RegisterGraphRequest& request,
                              v1::RegisterGraphResponse& response) {
  const BufferResolver resolve = [&session](uint64_t handle) {
    return session.FindBuffer(handle);
  };
  absl::StatusOr<std::unique_ptr<DecodedGraph>> graph = DecodeGraph(
      request.graph(), resolve, {.max_tensors = limits.max_graph_nodes});
  if (!graph.ok()) {
    return absl::Status(
        graph.status().code(),
        absl::StrCat("[RegisterGraph] ", graph.status().message()));
  }
  const int n_copies =
      request.n_copies() == 0
          ? 1
          : static_cast<int>(std::min<uint32_t>(request.n_copies(), 1000));
  // Over several devices stream threads pipeline the executions; on one,
  // the thread that drives them runs them, without a hand-off to a stream's
  // thread (which costs more than a short graph's compute).
  const RegisteredGraph::Runner runner =
      devices.size() == 1 ? RegisteredGraph::Runner::kCaller
                          : RegisteredGraph::Runner::kStreams;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RegisteredGraph> registered,
                           RegisteredGraph::Create(*std::move(graph), devices,
                                                   n_copies, limits, runner));
  response.set_n_splits(registered->n_splits());
  for (const auto& [device, bytes] : registered->compute_buffer_bytes()) {
    (*response.mutable_compute_buffer_bytes())[device] = bytes;
  }
  TESSERA_ASSIGN_OR_RETURN(
      MemoryCharge charge,
      session.Reserve(registered->memory_bytes(), "RegisterGraph"));
  TESSERA_ASSIGN_OR_RETURN(
      uint64_t handle,
      session.AddGraph(std::move(registered), std::move(charge)));
  response.set_graph(handle);
  return absl::OkStatus();
}

}  // namespace tessera::server
