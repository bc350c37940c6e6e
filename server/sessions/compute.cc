#include "server/sessions/compute.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sched/scheduler.h"
#include "server/decoding/graph_decoder.h"
#include "server/decoding/graph_io.h"

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
      CheckInputs(*graph, request.inputs(), resolve, /*require_all=*/true));
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
  if (status.ok()) status = WriteInputs(request.inputs(), inputs, resolve);
  if (status.ok()) status = sched->ComputeAsync(*graph->graph);
  for (size_t i = 0; status.ok() && i < outputs.size(); ++i) {
    v1::TensorData* out = response.add_outputs();
    out->set_id(request.outputs(i));
    std::string* data = out->mutable_data();
    data->resize(outputs[i]->NumBytes());
    status = sched->GetTensorAsync(*outputs[i], data->data(), 0, data->size());
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

}  // namespace tessera::server
