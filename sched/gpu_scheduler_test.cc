// The scheduler over a GPU and CPU devices: the MLP and the transformer block
// with their weights spread over cuda0 and cpu0 equal the same models on the
// CPU alone (within the GPU's rounding), activations copied both ways, and
// pipelined micro-batches (n_copies 1, 2 and 4) equal sequential compute.
// Every test skips where no GPU is found (a build without the CUDA Toolkit
// finds none).

#include <cmath>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/assembly/device_spec.h"
#include "backend/device.h"
#include "backend/registry.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "sched/scheduler.h"
#include "sched/testing/models.h"

namespace tessera {
namespace {

using testing::Block;
using testing::BlockGraph;
using testing::BlockInputs;
using testing::ComputePipelined;
using testing::Mlp;
using testing::MlpGraph;
using testing::MlpInput;
using testing::NaiveMlp;
using testing::Read;
using testing::Weights;
using testing::Write;

// cuBLAS sums in another order than the CPU's kernels: agreement to a few
// float roundings of the values' size, far below any wrong result.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "at " << i;
    ASSERT_NEAR(got[i], want[i], tolerance * (1.0f + std::fabs(want[i])))
        << "at " << i;
  }
}

class GpuSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(AddDevices("cuda", 1, gpus_).ok());
    if (gpus_.devices().empty()) GTEST_SKIP() << "no GPU";
    ASSERT_TRUE(AddDevices("cpu", 2, cpus_).ok());
    gpu_ = gpus_.devices()[0];
    cpu_ = cpus_.devices()[0];
    gpu_stream_ = gpu_->CreateStream().value();
    cpu_stream_ = cpu_->CreateStream().value();
  }

  std::unique_ptr<Scheduler> MakeScheduler(std::vector<Stream*> streams,
                                           SchedulerOptions options = {}) {
    absl::StatusOr<std::unique_ptr<Scheduler>> sched =
        Scheduler::Create(std::move(streams), {}, options);
    EXPECT_TRUE(sched.ok()) << sched.status();
    return sched.ok() ? *std::move(sched) : nullptr;
  }

  // The transformer block with its weights over `devices`, computed by a
  // scheduler over `streams`.
  std::vector<float> RunBlock(std::vector<Device*> devices,
                              std::vector<Stream*> streams, bool flash) {
    Weights weights(std::move(devices));
    Block block = Block::Make(weights).value();
    EXPECT_TRUE(weights.Upload().ok());
    Context ctx;
    Graph graph;
    const BlockGraph g = BlockGraph::Make(ctx, block, flash, graph).value();
    std::unique_ptr<Scheduler> sched = MakeScheduler(std::move(streams));
    absl::Status s = sched->AllocGraph(graph);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(g.WriteInputs(BlockInputs::Make()).ok());
    s = sched->Compute(graph);
    EXPECT_TRUE(s.ok()) << s;
    return Read(*g.out);
  }

  Registry gpus_, cpus_;
  Device* gpu_ = nullptr;
  Device* cpu_ = nullptr;
  std::unique_ptr<Stream> gpu_stream_, cpu_stream_;
};

TEST_F(GpuSchedulerTest, MlpOverGpuAndCpuIsTheMlp) {
  Weights weights({gpu_, cpu_});
  Mlp mlp = Mlp::Make(weights, 4).value();
  ASSERT_TRUE(weights.Upload().ok());
  Context ctx;
  Graph graph;
  auto [in, out] = MlpGraph(ctx, mlp, graph).value();
  std::unique_ptr<Scheduler> sched =
      MakeScheduler({gpu_stream_.get(), cpu_stream_.get()});
  absl::Status s = sched->AllocGraph(graph);
  ASSERT_TRUE(s.ok()) << s;
  // Weights alternate between the devices, so activations cross both ways.
  EXPECT_GT(sched->n_splits(), 2);
  EXPECT_GT(sched->n_inputs_copied(), 1);
  bool on_gpu = false, on_cpu = false;
  for (const Tensor* node : graph.nodes()) {
    on_gpu |= sched->GetTensorStream(node) == gpu_stream_.get();
    on_cpu |= sched->GetTensorStream(node) == cpu_stream_.get();
  }
  EXPECT_TRUE(on_gpu && on_cpu);
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE(k);
    const std::vector<float> x = MlpInput(k);
    ASSERT_TRUE(Write(*in, x.data()).ok());
    s = sched->Compute(graph);
    ASSERT_TRUE(s.ok()) << s;
    ExpectClose(Read(*out), NaiveMlp(mlp, x), 1e-4f);
  }
}

TEST_F(GpuSchedulerTest, TransformerBlockOverGpuAndCpuEqualsCpu) {
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "FLASH_ATTN_EXT" : "SOFT_MAX");
    const std::vector<float> want =
        RunBlock({cpu_}, {cpu_stream_.get()}, flash);
    const std::vector<float> split = RunBlock(
        {gpu_, cpu_}, {gpu_stream_.get(), cpu_stream_.get()}, flash);
    ExpectClose(split, want, 1e-3f);
    const std::vector<float> gpu_only =
        RunBlock({gpu_}, {gpu_stream_.get(), cpu_stream_.get()}, flash);
    ExpectClose(gpu_only, want, 1e-3f);
  }
}

TEST_F(GpuSchedulerTest, PipelinedMicroBatchesEqualSequentialCompute) {
  constexpr int kBatches = 12;
  Weights weights({gpu_, cpu_});
  Mlp mlp = Mlp::Make(weights, 4).value();
  ASSERT_TRUE(weights.Upload().ok());
  for (int n_copies : {1, 2, 4}) {
    SCOPED_TRACE(n_copies);
    Context ctx;
    Graph graph;
    auto [in, out] = MlpGraph(ctx, mlp, graph).value();
    std::unique_ptr<Scheduler> sched = MakeScheduler(
        {gpu_stream_.get(), cpu_stream_.get()}, {.n_copies = n_copies});
    ASSERT_TRUE(sched->AllocGraph(graph).ok());
    EXPECT_EQ(sched->n_copies(), n_copies);
    absl::StatusOr<std::vector<std::vector<float>>> got =
        ComputePipelined(*sched, graph, *in, *out, kBatches);
    ASSERT_TRUE(got.ok()) << got.status();
    for (int k = 0; k < kBatches; ++k) {
      SCOPED_TRACE(k);
      ASSERT_TRUE(Write(*in, MlpInput(k).data()).ok());
      ASSERT_TRUE(sched->Compute(graph).ok());
      // The same kernels on the same data: equal up to cuBLAS's choice of
      // algorithm, which may differ between the pipelined and the
      // sequential run only in rounding.
      ExpectClose((*got)[k], Read(*out), 1e-5f);
      ExpectClose((*got)[k], NaiveMlp(mlp, MlpInput(k)), 1e-4f);
    }
  }
}

}  // namespace
}  // namespace tessera
