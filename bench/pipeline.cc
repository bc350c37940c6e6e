// Pipeline parallelism of the scheduler: a two-stage graph over two CPU
// devices with one thread each (stage 1's weights on cpu0, stage 2's on
// cpu1), K micro-batches queued with ComputeAsync, n_copies = 1 (one graph
// in flight: the devices take turns) versus 4 (micro-batch k+1 on cpu0
// while k runs on cpu1).
//
// The limits, measured in the same run: each stage alone on its device (one
// graph in flight cannot beat the sum of the stages' times, a pipeline
// cannot beat the slower stage's: (t1 + t2) / max(t1, t2), 2.0 for equal
// stages), and what the machine gives two threads at once: the stages'
// sgemm calls made by two plain threads at the same time versus one after
// the other (on shared or throttled cores this is below 2.0, and no
// pipeline can beat it).
//
// Last, the cost of one split boundary (event record, wait and the copy of
// a small tensor between the devices): a chain of small ops computed on one
// device, then alternating between the two, each op a split of its own.
//
//   bazel run -c opt //bench:pipeline [-- K [dim [layers_per_stage [tokens]]]]

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
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
  int batches = 64;     // K micro-batches per measurement
  int64_t dim = 512;    // weights are dim x dim
  int64_t tokens = 64;  // columns of each micro-batch: compute-bound stages
  int layers = 4;       // MUL_MATs per stage
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

// Builds the graph of `stages` (each a split of its own), then computes
// `config.batches` micro-batches (after a warm-up of n_copies + 1) with the
// given pipeline depth.
absl::StatusOr<Run> Measure(std::vector<Stream*> streams,
                            const std::vector<const Stage*>& stages,
                            const Config& config, int n_copies) {
  Context ctx;
  TESSERA_ASSIGN_OR_RETURN(
      Tensor * x, ctx.NewTensor(Type::kF32, {config.dim, config.tokens}));
  x->name = "x";
  x->flags |= kFlagInput;
  Tensor* h = x;
  for (const Stage* stage : stages) {
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
  if (sched->n_splits() != static_cast<int>(stages.size())) {
    return absl::InternalError(absl::StrCat("expected ", stages.size(),
                                            " splits, got ", sched->n_splits()));
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

// Microseconds per Compute of a chain of `ops` SCALEs of a small tensor:
// all on streams[0] (`split` false) or alternating between the two streams,
// each op a split whose input is copied from the other device.
absl::StatusOr<double> ChainMicros(const std::vector<Stream*>& streams,
                                   int ops, bool split) {
  constexpr int kRepeats = 2000;
  Context ctx;
  TESSERA_ASSIGN_OR_RETURN(Tensor * x, ctx.NewTensor(Type::kF32, {256}));
  x->flags |= kFlagInput;
  std::vector<Tensor*> chain;
  Tensor* h = x;
  for (int i = 0; i < ops; ++i) {
    TESSERA_ASSIGN_OR_RETURN(h, Scale(ctx, h, 1.0f + 1.0f / (i + 2)));
    chain.push_back(h);
  }
  h->flags |= kFlagOutput;
  Graph graph;
  TESSERA_RETURN_IF_ERROR(graph.Expand(h));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> sched,
                           Scheduler::Create(streams, {}, {}));
  for (int i = 0; i < ops; ++i) {
    TESSERA_RETURN_IF_ERROR(
        sched->SetTensorStream(chain[i], streams[split ? i % 2 : 0]));
  }
  TESSERA_RETURN_IF_ERROR(sched->AllocGraph(graph));
  if (sched->n_splits() != (split ? ops : 1)) {
    return absl::InternalError(absl::StrCat("the chain has ", sched->n_splits(),
                                            " splits"));
  }
  const std::vector<float> input(256, 1.0f);
  std::vector<double> micros;
  for (int r = 0; r < kRepeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    TESSERA_RETURN_IF_ERROR(
        x->buffer->SetTensor(*x, input.data(), 0, x->NumBytes()));
    TESSERA_RETURN_IF_ERROR(sched->Compute(graph));
    micros.push_back(std::chrono::duration<double, std::micro>(
                         std::chrono::steady_clock::now() - start)
                         .count());
  }
  std::nth_element(micros.begin(), micros.begin() + micros.size() / 2,
                   micros.end());
  return micros[micros.size() / 2];
}

// Seconds for `config.batches` rounds of the stages' products as plain
// single-threaded sgemm calls (the shapes CpuDevice passes to BLAS): both
// stages on one thread, or each stage on a thread of its own at once.
double PlainSgemmSeconds(const Config& config, bool two_threads) {
  openblas_set_num_threads(1);
  const int64_t d = config.dim;
  const int64_t n = config.tokens;
  std::vector<float> w(d * d, 0.01f);
  auto stage = [&](std::vector<float>& x, std::vector<float>& y) {
    for (int k = 0; k < config.batches; ++k) {
      for (int l = 0; l < config.layers; ++l) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, d, d, 1.0f,
                    x.data(), d, w.data(), d, 0.0f, y.data(), d);
        std::swap(x, y);
      }
    }
  };
  std::vector<float> x1(d * n, 1.0f), y1(d * n), x2(d * n, 1.0f), y2(d * n);
  const auto start = std::chrono::steady_clock::now();
  if (two_threads) {
    std::thread other([&] { stage(x2, y2); });
    stage(x1, y1);
    other.join();
  } else {
    stage(x1, y1);
    stage(x2, y2);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
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
      "1 thread each, %d micro-batches\n\n",
      config.layers, config.dim, config.dim, config.tokens, config.batches);
  absl::PrintF("%-26s %16s %12s\n", "case", "micro-batches/s", "ms/batch");
  auto row = [&](const std::string& name, double seconds) {
    absl::PrintF("%-26s %16.1f %12.3f\n", name, config.batches / seconds,
                 1e3 * seconds / config.batches);
  };
  // The limit: each stage alone on its own device.
  TESSERA_ASSIGN_OR_RETURN(Run alone1,
                           Measure({streams[0]}, {&s1}, config, 1));
  TESSERA_ASSIGN_OR_RETURN(Run alone2,
                           Measure({streams[1]}, {&s2}, config, 1));
  row("stage 1 alone (cpu0)", alone1.seconds);
  row("stage 2 alone (cpu1)", alone2.seconds);
  TESSERA_ASSIGN_OR_RETURN(Run serial,
                           Measure(streams, {&s1, &s2}, config, 1));
  TESSERA_ASSIGN_OR_RETURN(Run pipelined,
                           Measure(streams, {&s1, &s2}, config, 4));
  row("both, n_copies 1", serial.seconds);
  row("both, n_copies 4", pipelined.seconds);
  for (int k = 0; k < config.batches; ++k) {
    if (std::memcmp(serial.outputs[k].data(), pipelined.outputs[k].data(),
                    serial.outputs[k].size() * sizeof(float)) != 0) {
      return absl::InternalError(absl::StrCat(
          "micro-batch ", k, " differs between n_copies 1 and 4"));
    }
  }
  const double one_thread = PlainSgemmSeconds(config, false);
  const double two_threads = PlainSgemmSeconds(config, true);
  row("plain sgemm, 1 thread", one_thread);
  row("plain sgemm, 2 threads", two_threads);
  const double balance = (alone1.seconds + alone2.seconds) /
                         std::max(alone1.seconds, alone2.seconds);
  const double machine = one_thread / two_threads;
  absl::PrintF(
      "\nn_copies 4 / n_copies 1: %.2f (outputs equal)\n"
      "limits: stage balance (t1 + t2) / max(t1, t2) %.2f; two plain sgemm "
      "threads / one %.2f\n"
      "ratio to the lower limit: %.2f\n",
      serial.seconds / pipelined.seconds, balance, machine,
      serial.seconds / pipelined.seconds / std::min(balance, machine));
  absl::PrintF(
      "n_copies 1 / sum of the stages alone: %.2f (1.00: no overhead)\n",
      serial.seconds / (alone1.seconds + alone2.seconds));

  constexpr int kChain = 16;
  TESSERA_ASSIGN_OR_RETURN(double one, ChainMicros(streams, kChain, false));
  TESSERA_ASSIGN_OR_RETURN(double alternating,
                           ChainMicros(streams, kChain, true));
  absl::PrintF(
      "\nsplit boundary: %d SCALEs of 256 floats, median of 2000 computes: "
      "%.1f us on cpu0, %.1f us alternating cpu0/cpu1 (%d boundaries): "
      "%.1f us per boundary\n",
      kChain, one, alternating, kChain - 1,
      (alternating - one) / (kChain - 1));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::Config config;
  if (argc > 1) config.batches = std::max(1, std::atoi(argv[1]));
  if (argc > 2) config.dim = std::max(32, std::atoi(argv[2]));
  if (argc > 3) config.layers = std::max(1, std::atoi(argv[3]));
  if (argc > 4) config.tokens = std::max(1, std::atoi(argv[4]));
  absl::Status status = tessera::Main(config);
  if (!status.ok()) {
    absl::FPrintF(stderr, "pipeline: %s\n", status.ToString());
    return 1;
  }
  return 0;
}
