// Pipeline parallelism of the scheduler: a two-stage graph over two CPU
// devices with one thread each (stage 1's weights on cpu0, stage 2's on
// cpu1), K micro-batches queued with ComputeAsync, n_copies = 1 (one graph
// in flight: the devices take turns) versus 4 (micro-batch k+1 on cpu0
// while k runs on cpu1).
//
//   bazel run -c opt //bench:pipeline [-- K [dim [layers_per_stage]]]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backend/device.h"
#include "backend/assembly/device_spec.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "base/status_macros.h"
#include "backend/alloc/tensor_allocator.h"
#include "sched/scheduler.h"

namespace tessera {
namespace {

struct Config {
  int batches = 32;    // K micro-batches per measurement
  int64_t dim = 512;   // weights are dim x dim
  int64_t tokens = 8;  // columns of each micro-batch
  int layers = 4;      // MUL_MATs per stage
};

// Weights of one stage: `layers` dim x dim matrices on `device`, scaled so
// that activations keep their magnitude.
struct Stage {
  Context ctx;
  std::vector<Tensor*> weights;
  std::unique_ptr<Buffer> buffer;
};

absl::Status MakeStage(Device& device, const Config& config, int seed,
                       Stage& stage) {
  for (int l = 0; l < config.layers; ++l) {
    TESSERA_ASSIGN_OR_RETURN(
        Tensor * w, stage.ctx.NewTensor(Type::kF32, {config.dim, config.dim}));
    w->name = absl::StrCat("w", seed, ".", l);
    stage.weights.push_back(w);
  }
  TESSERA_ASSIGN_OR_RETURN(stage.buffer,
                           AllocTensors(device.buffer_type(), stage.weights));
  stage.buffer->set_usage(BufferUsage::kWeights);
  const float scale = 1.7f / std::sqrt(static_cast<float>(config.dim));
  std::vector<float> values(config.dim * config.dim);
  for (size_t l = 0; l < stage.weights.size(); ++l) {
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = scale * std::sin(0.61f * i + 2.3f * (seed * 16 + l));
    }
    Tensor* w = stage.weights[l];
    TESSERA_RETURN_IF_ERROR(
        w->buffer->SetTensor(*w, values.data(), 0, w->NumBytes()));
  }
  return absl::OkStatus();
}

struct Run {
  double seconds = 0;
  std::vector<std::vector<float>> outputs;
};

// Builds the graph, then computes `config.batches` micro-batches (after a
// warm-up of n_copies + 1) with the given pipeline depth.
absl::StatusOr<Run> Measure(std::vector<Stream*> streams, const Stage& s1,
                            const Stage& s2, const Config& config,
                            int n_copies) {
  Context ctx;
  TESSERA_ASSIGN_OR_RETURN(
      Tensor * x, ctx.NewTensor(Type::kF32, {config.dim, config.tokens}));
  x->name = "x";
  x->flags |= kFlagInput;
  Tensor* h = x;
  for (const Stage* stage : {&s1, &s2}) {
    for (Tensor* w : stage->weights) {
      TESSERA_ASSIGN_OR_RETURN(h, MulMat(ctx, w, h));
    }
  }
  h->flags |= kFlagOutput;
  Graph graph;
  TESSERA_RETURN_IF_ERROR(graph.Expand(h));

  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<Scheduler> sched,
      Scheduler::Create(std::move(streams), {}, {.n_copies = n_copies}));
  TESSERA_RETURN_IF_ERROR(sched->AllocGraph(graph));
  if (sched->n_splits() != 2) {
    return absl::InternalError(
        absl::StrCat("expected 2 splits, got ", sched->n_splits()));
  }

  std::vector<std::vector<float>> inputs(config.batches);
  for (int k = 0; k < config.batches; ++k) {
    inputs[k].resize(x->NumElements());
    for (size_t i = 0; i < inputs[k].size(); ++i) {
      inputs[k][i] = std::cos(0.13f * i + 0.7f * k);
    }
  }
  Run run;
  run.outputs.assign(config.batches, std::vector<float>(h->NumElements()));
  for (int k = 0; k < n_copies + 1; ++k) {
    TESSERA_RETURN_IF_ERROR(
        x->buffer->SetTensor(*x, inputs[0].data(), 0, x->NumBytes()));
    TESSERA_RETURN_IF_ERROR(sched->ComputeAsync(graph));
  }
  TESSERA_RETURN_IF_ERROR(sched->Synchronize());

  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < config.batches; ++k) {
    TESSERA_RETURN_IF_ERROR(
        x->buffer->SetTensor(*x, inputs[k].data(), 0, x->NumBytes()));
    TESSERA_RETURN_IF_ERROR(sched->ComputeAsync(graph));
    TESSERA_RETURN_IF_ERROR(
        sched->GetTensorAsync(*h, run.outputs[k].data(), 0, h->NumBytes()));
  }
  TESSERA_RETURN_IF_ERROR(sched->Synchronize());
  run.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return run;
}

absl::Status Main(const Config& config) {
  Registry registry;
  TESSERA_RETURN_IF_ERROR(AddDevices("cpu:2", /*cpu_threads=*/1, registry));
  std::vector<std::unique_ptr<Stream>> owned;
  std::vector<Stream*> streams;
  for (Device* device : registry.devices()) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                             device->CreateStream());
    streams.push_back(stream.get());
    owned.push_back(std::move(stream));
  }
  Stage s1, s2;
  TESSERA_RETURN_IF_ERROR(MakeStage(*registry.devices()[0], config, 1, s1));
  TESSERA_RETURN_IF_ERROR(MakeStage(*registry.devices()[1], config, 2, s2));

  absl::PrintF(
      "two stages of %d MUL_MATs (%d x %d weights, %d columns), cpu0 -> cpu1, "
      "1 thread each\n\n",
      config.layers, config.dim, config.dim, config.tokens);
  absl::PrintF("%8s %6s %16s %12s\n", "n_copies", "K", "micro-batches/s",
               "ms/batch");
  double base = 0;
  std::vector<std::vector<float>> base_outputs;
  for (int n_copies : {1, 4}) {
    TESSERA_ASSIGN_OR_RETURN(Run run,
                             Measure(streams, s1, s2, config, n_copies));
    const double rate = config.batches / run.seconds;
    absl::PrintF("%8d %6d %16.1f %12.2f\n", n_copies, config.batches, rate,
                 1e3 * run.seconds / config.batches);
    if (n_copies == 1) {
      base = rate;
      base_outputs = std::move(run.outputs);
    } else {
      for (int k = 0; k < config.batches; ++k) {
        if (std::memcmp(base_outputs[k].data(), run.outputs[k].data(),
                        base_outputs[k].size() * sizeof(float)) != 0) {
          return absl::InternalError(absl::StrCat(
              "micro-batch ", k, " differs between n_copies 1 and ", n_copies));
        }
      }
      absl::PrintF("\nratio n_copies=4 / n_copies=1: %.2f (outputs equal)\n",
                   rate / base);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::Config config;
  if (argc > 1) config.batches = std::max(1, std::atoi(argv[1]));
  if (argc > 2) config.dim = std::max(32, std::atoi(argv[2]));
  if (argc > 3) config.layers = std::max(1, std::atoi(argv[3]));
  absl::Status status = tessera::Main(config);
  if (!status.ok()) {
    absl::FPrintF(stderr, "pipeline: %s\n", status.ToString());
    return 1;
  }
  return 0;
}
