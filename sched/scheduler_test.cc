#include "sched/scheduler.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/assembly/device_spec.h"
#include "backend/cpu/cpu_device.h"
#include "base/status_macros.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "gtest/gtest.h"
#include "sched/testing/models.h"
#include "sched/testing/partial_device.h"

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
using testing::NewInput;
using testing::Read;
using testing::Value;
using testing::Weights;
using testing::Write;

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(AddDevices("cpu:4", 1, registry_).ok());
    for (Device* device : registry_.devices()) {
      cpus_.push_back(device);
      absl::StatusOr<std::unique_ptr<Stream>> stream = device->CreateStream();
      ASSERT_TRUE(stream.ok()) << stream.status();
      streams_.push_back(*std::move(stream));
    }
    ASSERT_EQ(cpus_.size(), 4u);
  }

  // Streams of the first `n` CPU devices.
  std::vector<Stream*> CpuStreams(int n) {
    std::vector<Stream*> out;
    for (int i = 0; i < n; ++i) out.push_back(streams_[i].get());
    return out;
  }
  std::vector<Device*> Cpus(int n) {
    return std::vector<Device*>(cpus_.begin(), cpus_.begin() + n);
  }

  std::unique_ptr<Scheduler> MakeScheduler(std::vector<Stream*> streams,
                                           SchedulerOptions options = {}) {
    absl::StatusOr<std::unique_ptr<Scheduler>> sched =
        Scheduler::Create(std::move(streams), {}, options);
    EXPECT_TRUE(sched.ok()) << sched.status();
    return sched.ok() ? *std::move(sched) : nullptr;
  }

  // Computes the MLP on `x` with its weights spread over `n` devices and
  // one stream per device.
  std::vector<float> RunMlp(int n, const std::vector<float>& x,
                            int* n_splits = nullptr) {
    Weights weights(Cpus(n));
    absl::StatusOr<Mlp> mlp = Mlp::Make(weights, 4);
    EXPECT_TRUE(mlp.ok() && weights.Upload().ok());
    Context ctx;
    Graph graph;
    auto [in, out] = MlpGraph(ctx, *mlp, graph).value();
    std::unique_ptr<Scheduler> sched = MakeScheduler(CpuStreams(n));
    EXPECT_TRUE(sched->AllocGraph(graph).ok());
    EXPECT_TRUE(Write(*in, x.data()).ok());
    absl::Status s = sched->Compute(graph);
    EXPECT_TRUE(s.ok()) << s;
    if (n_splits != nullptr) *n_splits = sched->n_splits();
    return Read(*out);
  }

  // Computes the transformer block with its weights spread over `n`
  // devices.
  std::vector<float> RunBlock(int n, bool flash, int* n_splits = nullptr) {
    Weights weights(Cpus(n));
    absl::StatusOr<Block> block = Block::Make(weights);
    EXPECT_TRUE(block.ok() && weights.Upload().ok());
    Context ctx;
    Graph graph;
    absl::StatusOr<BlockGraph> g = BlockGraph::Make(ctx, *block, flash, graph);
    EXPECT_TRUE(g.ok()) << g.status();
    std::unique_ptr<Scheduler> sched = MakeScheduler(CpuStreams(n));
    absl::Status s = sched->AllocGraph(graph);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(g->WriteInputs(BlockInputs::Make()).ok());
    s = sched->Compute(graph);
    EXPECT_TRUE(s.ok()) << s;
    if (n_splits != nullptr) *n_splits = sched->n_splits();
    return Read(*g->out);
  }

  Registry registry_;
  std::vector<Device*> cpus_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

void ExpectBitwiseEqual(const std::vector<float>& a,
                        const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i], b[i]) << "at " << i;
  }
}

TEST_F(SchedulerTest, MlpOverTwoAndFourDevicesEqualsOneDevice) {
  const std::vector<float> x = MlpInput(0);
  int splits1 = 0, splits2 = 0, splits4 = 0;
  std::vector<float> one = RunMlp(1, x, &splits1);
  std::vector<float> two = RunMlp(2, x, &splits2);
  std::vector<float> four = RunMlp(4, x, &splits4);
  EXPECT_EQ(splits1, 1);
  EXPECT_GT(splits2, 1);
  EXPECT_GT(splits4, 1);
  ExpectBitwiseEqual(one, two);
  ExpectBitwiseEqual(one, four);

  // And it is the MLP.
  Weights weights(Cpus(1));
  Mlp mlp = Mlp::Make(weights, 4).value();
  ASSERT_TRUE(weights.Upload().ok());
  std::vector<float> want = NaiveMlp(mlp, x);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(one[i], want[i], 1e-4f * (1.0f + std::fabs(want[i])));
  }
}

TEST_F(SchedulerTest, TransformerBlockOverTwoAndFourDevicesEqualsOneDevice) {
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "FLASH_ATTN_EXT" : "SOFT_MAX");
    int splits1 = 0, splits2 = 0, splits4 = 0;
    std::vector<float> one = RunBlock(1, flash, &splits1);
    std::vector<float> two = RunBlock(2, flash, &splits2);
    std::vector<float> four = RunBlock(4, flash, &splits4);
    EXPECT_EQ(splits1, 1);
    EXPECT_GT(splits2, 1);
    EXPECT_GT(splits4, 1);
    for (float v : one) ASSERT_TRUE(std::isfinite(v));
    ExpectBitwiseEqual(one, two);
    ExpectBitwiseEqual(one, four);
  }
}

TEST_F(SchedulerTest, SoftMaxAndFlashAttentionBlocksAgree) {
  std::vector<float> soft = RunBlock(2, false);
  std::vector<float> flash = RunBlock(2, true);
  ASSERT_EQ(soft.size(), flash.size());
  for (size_t i = 0; i < soft.size(); ++i) {
    EXPECT_NEAR(soft[i], flash[i], 1e-4f * (1.0f + std::fabs(soft[i])));
  }
}

// A "GPU" that computes only MUL_MAT and ADD, in front of a CPU fallback.
class PartialSchedulerTest : public SchedulerTest {
 protected:
  std::unique_ptr<Scheduler> MakePartial(PartialDeviceOptions options) {
    options.ops = {Op::kMulMat, Op::kAdd};
    partial_ = std::make_unique<PartialDevice>(*cpus_[0], options);
    partial_stream_ = partial_->CreateStream().value();
    return MakeScheduler({partial_stream_.get(), streams_[1].get()});
  }

  // The 3-layer MLP with every weight on the partial device.
  void CheckMlp(Scheduler& sched) {
    Weights weights({partial_.get()});
    Mlp mlp = Mlp::Make(weights, 3).value();
    ASSERT_TRUE(weights.Upload().ok());
    Context ctx;
    Graph graph;
    auto [in, out] = MlpGraph(ctx, mlp, graph).value();
    absl::Status s = sched.AllocGraph(graph);
    ASSERT_TRUE(s.ok()) << s;

    // Pass 1 puts MUL_MAT and ADD with their weights; pass 2 cannot spread
    // the partial device over RELU; pass 3 puts RELU on the CPU. So the
    // splits are [mm0 add0] [relu0] [mm1 add1] [relu1] [mm2 add2]: four
    // activations cross devices, and x is staged on the partial device.
    EXPECT_EQ(sched.n_splits(), 5);
    EXPECT_EQ(sched.n_inputs_copied(), 4);
    EXPECT_EQ(sched.n_inputs_staged(), 1);
    for (int i = 0; i < 3; ++i) {
      const std::string n = std::to_string(i);
      for (const Tensor* node : graph.nodes()) {
        if (node->name == "mm" + n || node->name == "add" + n) {
          EXPECT_EQ(sched.GetTensorStream(node), partial_stream_.get())
              << node->name;
        }
        if (node->name == "relu" + n) {
          EXPECT_EQ(sched.GetTensorStream(node), streams_[1].get());
        }
      }
    }
    // The input goes to the fallback (ggml's rule for graph inputs).
    EXPECT_EQ(sched.GetTensorStream(in), streams_[1].get());

    const std::vector<float> x = MlpInput(3);
    ASSERT_TRUE(Write(*in, x.data()).ok());
    const int64_t before = partial_->nodes_computed();
    s = sched.Compute(graph);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(partial_->nodes_computed() - before, 6);
    std::vector<float> got = Read(*out);
    std::vector<float> want = NaiveMlp(mlp, x);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i])));
    }
  }

  std::unique_ptr<PartialDevice> partial_;
  std::unique_ptr<Stream> partial_stream_;
};

TEST_F(PartialSchedulerTest, UnsupportedOpsFallBackWithPredictedSplits) {
  std::unique_ptr<Scheduler> sched = MakePartial({});
  CheckMlp(*sched);
}

TEST_F(PartialSchedulerTest, SynchronousCopiesWithoutEvents) {
  PartialDeviceOptions options;
  options.async_events = false;
  std::unique_ptr<Scheduler> sched = MakePartial(options);
  CheckMlp(*sched);
}

TEST_F(PartialSchedulerTest, HostStagedCopiesWhenTheStreamCannotCopy) {
  PartialDeviceOptions options;
  options.copies = false;
  std::unique_ptr<Scheduler> sched = MakePartial(options);
  CheckMlp(*sched);
}

TEST_F(PartialSchedulerTest, NodeNoDeviceSupportsIsInvalidArgument) {
  PartialDeviceOptions gpu_options;
  gpu_options.ops = {Op::kMulMat};
  PartialDevice gpu(*cpus_[0], gpu_options);
  PartialDeviceOptions cpu_options;
  cpu_options.name = "partial1";
  cpu_options.type = DeviceType::kCpu;
  cpu_options.ops = {Op::kAdd};
  PartialDevice cpu(*cpus_[1], cpu_options);
  std::unique_ptr<Stream> s0 = gpu.CreateStream().value();
  std::unique_ptr<Stream> s1 = cpu.CreateStream().value();
  std::unique_ptr<Scheduler> sched = MakeScheduler({s0.get(), s1.get()});

  Context ctx;
  Tensor* x = NewInput(ctx, Type::kF32, {4, 2}, "x").value();
  Tensor* r = Unary(ctx, x, UnaryOp::kRelu).value();
  r->name = "the_relu";
  Tensor* y = tessera::Add(ctx, r, x).value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(y).ok());
  absl::Status s = sched->AllocGraph(graph);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("the_relu"), absl::string_view::npos) << s;
}

TEST_F(SchedulerTest, PipelinedMicroBatchesEqualSequentialCompute) {
  constexpr int kBatches = 12;
  Weights weights(Cpus(2));
  Mlp mlp = Mlp::Make(weights, 4).value();
  ASSERT_TRUE(weights.Upload().ok());

  for (int n_copies : {1, 2, 4}) {
    SCOPED_TRACE(n_copies);
    // A graph belongs to the scheduler that allocated it: one per run.
    Context ctx;
    Graph graph;
    auto [in, out] = MlpGraph(ctx, mlp, graph).value();
    std::unique_ptr<Scheduler> sched =
        MakeScheduler(CpuStreams(2), {.n_copies = n_copies});
    ASSERT_TRUE(sched->AllocGraph(graph).ok());
    EXPECT_EQ(sched->n_copies(), n_copies);
    EXPECT_GT(sched->n_splits(), 1);
    absl::StatusOr<std::vector<std::vector<float>>> got =
        ComputePipelined(*sched, graph, *in, *out, kBatches);
    ASSERT_TRUE(got.ok()) << got.status();
    // Sequential compute of the same graph, one micro-batch at a time.
    for (int k = 0; k < kBatches; ++k) {
      SCOPED_TRACE(k);
      ASSERT_TRUE(Write(*in, MlpInput(k).data()).ok());
      ASSERT_TRUE(sched->Compute(graph).ok());
      ExpectBitwiseEqual(Read(*out), (*got)[k]);
    }
  }
}

TEST_F(SchedulerTest, ReserveOnceThenSameShapeGraphsAllocateNothing) {
  Weights weights(Cpus(2));
  Mlp mlp = Mlp::Make(weights, 3).value();
  ASSERT_TRUE(weights.Upload().ok());
  std::unique_ptr<Scheduler> sched =
      MakeScheduler(CpuStreams(2), {.n_copies = 2});

  auto build = [&](Context& ctx, Graph& graph) {
    return MlpGraph(ctx, mlp, graph).value();
  };
  {
    Context ctx;
    Graph measure;
    build(ctx, measure);
    absl::Status s = sched->Reserve(measure);
    ASSERT_TRUE(s.ok()) << s;
  }
  const int64_t reserved = sched->compute_buffer_allocations();
  EXPECT_GT(reserved, 0);
  EXPECT_GT(sched->compute_buffer_size(streams_[0].get()), 0u);
  EXPECT_GT(sched->compute_buffer_size(streams_[1].get()), 0u);

  for (int k = 0; k < 5; ++k) {
    Context ctx;
    Graph graph;
    auto [in, out] = build(ctx, graph);
    absl::Status s = sched->AllocGraph(graph);
    ASSERT_TRUE(s.ok()) << s;
    const std::vector<float> x = MlpInput(k);
    ASSERT_TRUE(Write(*in, x.data()).ok());
    ASSERT_TRUE(sched->Compute(graph).ok());
    std::vector<float> got = Read(*out);
    std::vector<float> want = NaiveMlp(mlp, x);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i])));
    }
    EXPECT_EQ(sched->compute_buffer_allocations(), reserved);
  }
}

TEST_F(SchedulerTest, GraphLargerThanGraphSizeIsResourceExhausted) {
  Weights weights(Cpus(1));
  Mlp mlp = Mlp::Make(weights, 3).value();
  ASSERT_TRUE(weights.Upload().ok());
  Context ctx;
  Tensor* in = NewInput(ctx, Type::kF32, {Mlp::kDim, Mlp::kBatch}, "x").value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(mlp.Forward(ctx, in).value()).ok());
  std::unique_ptr<Scheduler> sched =
      MakeScheduler(CpuStreams(1), {.graph_size = 6});
  absl::Status s = sched->AllocGraph(graph);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("graph_size 6"), absl::string_view::npos) << s;
  EXPECT_EQ(sched->Reserve(graph).code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(SchedulerTest, EvalCallbackObservesNodesAndCancels) {
  Weights weights(Cpus(2));
  Mlp mlp = Mlp::Make(weights, 2).value();
  ASSERT_TRUE(weights.Upload().ok());
  Context ctx;
  Graph graph;
  auto [in, out] = MlpGraph(ctx, mlp, graph).value();
  std::unique_ptr<Scheduler> sched = MakeScheduler(CpuStreams(2));
  ASSERT_TRUE(sched->AllocGraph(graph).ok());
  const std::vector<float> x = MlpInput(1);
  ASSERT_TRUE(Write(*in, x.data()).ok());

  // Observe relu0: its value is max(add0, 0), read at observation time.
  std::vector<std::string> asked;
  std::vector<float> relu_seen;
  const Tensor* add0 = nullptr;
  for (const Tensor* node : graph.nodes()) {
    if (node->name == "add0") add0 = node;
  }
  ASSERT_NE(add0, nullptr);
  std::vector<float> add_seen;
  sched->SetEvalCallback([&](Tensor* node, bool ask) {
    if (ask) {
      asked.push_back(node->name);
      return node->name == "relu0" || node->name == "add0";
    }
    if (node->name == "add0") add_seen = Read(*node);
    if (node->name == "relu0") relu_seen = Read(*node);
    return true;
  });
  absl::Status s = sched->Compute(graph);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(asked,
            (std::vector<std::string>{"mm0", "add0", "relu0", "mm1", "add1"}));
  ASSERT_EQ(relu_seen.size(), add_seen.size());
  for (size_t i = 0; i < add_seen.size(); ++i) {
    EXPECT_EQ(relu_seen[i], std::max(add_seen[i], 0.0f));
  }
  std::vector<float> want = NaiveMlp(mlp, x);
  std::vector<float> got = Read(*out);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i])));
  }

  // Cancelling at relu0: nothing after it runs.
  asked.clear();
  sched->SetEvalCallback([&](Tensor* node, bool ask) {
    if (ask) asked.push_back(node->name);
    return ask ? node->name == "relu0" : false;
  });
  s = sched->Compute(graph);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(asked, (std::vector<std::string>{"mm0", "add0", "relu0"}));

  // Without a callback it computes again.
  sched->SetEvalCallback(nullptr);
  ASSERT_TRUE(sched->Compute(graph).ok());
}

// SET_ROWS returns a view of its destination: a node that reads that view
// reads the destination after the rows were set, also when the destination
// is an input the scheduler places and the reader is on another device,
// and also through a further view of it (as a KV cache is read), whose view
// source is the destination itself.
TEST_F(SchedulerTest, ReadersOfSetRowsSeeTheRowsSet) {
  for (auto [n, through_view] :
       {std::pair{1, false}, {2, false}, {1, true}, {2, true}}) {
    Context ctx;
    Tensor* dst = NewInput(ctx, Type::kF32, {4, 3}, "dst").value();
    Tensor* src = NewInput(ctx, Type::kF32, {4, 1}, "src").value();
    Tensor* idx = NewInput(ctx, Type::kI32, {1}, "idx").value();
    Tensor* set = SetRows(ctx, dst, src, idx).value();
    Tensor* read = through_view ? View(ctx, set, {4, 3}, {16}, 0).value() : set;
    Tensor* out = Scale(ctx, read, 2.0f).value();
    out->flags |= kFlagOutput;
    Graph graph;
    ASSERT_TRUE(graph.Expand(out).ok());
    std::unique_ptr<Scheduler> sched = MakeScheduler(CpuStreams(n));
    if (n == 2) {
      ASSERT_TRUE(sched->SetTensorStream(out, streams_[0].get()).ok());
    }
    ASSERT_TRUE(sched->AllocGraph(graph).ok());
    const std::vector<float> d(12, 1.0f);
    const std::vector<float> row = {5, 6, 7, 8};
    const int32_t at = 1;
    ASSERT_TRUE(Write(*dst, d.data()).ok());
    ASSERT_TRUE(Write(*src, row.data()).ok());
    ASSERT_TRUE(Write(*idx, &at).ok());
    ASSERT_TRUE(sched->Compute(graph).ok());
    const std::vector<float> got = Read(*out);
    for (int i = 0; i < 12; ++i) {
      const float want = 2.0f * (i / 4 == 1 ? row[i % 4] : 1.0f);
      EXPECT_EQ(got[i], want) << "devices " << n << " through a view "
                              << through_view << " element " << i;
    }
  }
}

TEST_F(SchedulerTest, PinnedNodeRunsWhereItIsPinned) {
  Weights weights(Cpus(1));
  Mlp mlp = Mlp::Make(weights, 2).value();
  ASSERT_TRUE(weights.Upload().ok());
  Context ctx;
  Graph graph;
  auto [in, out] = MlpGraph(ctx, mlp, graph).value();
  Tensor* relu = nullptr;
  for (Tensor* node : graph.nodes()) {
    if (node->name == "relu0") relu = node;
  }
  ASSERT_NE(relu, nullptr);

  std::unique_ptr<Scheduler> sched = MakeScheduler(CpuStreams(2));
  ASSERT_TRUE(sched->AllocGraph(graph).ok());
  EXPECT_EQ(sched->n_splits(), 1);
  EXPECT_EQ(sched->GetTensorStream(relu), streams_[0].get());

  ASSERT_TRUE(sched->SetTensorStream(relu, streams_[1].get()).ok());
  EXPECT_EQ(sched->SetTensorStream(relu, streams_[2].get()).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> x = MlpInput(2);
  ASSERT_TRUE(sched->AllocGraph(graph).ok());
  ASSERT_TRUE(Write(*in, x.data()).ok());
  ASSERT_TRUE(sched->Compute(graph).ok());
  EXPECT_EQ(sched->GetTensorStream(relu), streams_[1].get());
  // [mm0 add0] [relu0] [mm1 add1]: pass 2 does not spread cpu1, the
  // fallback, beyond its pinned node.
  EXPECT_EQ(sched->n_splits(), 3);
  EXPECT_EQ(sched->n_inputs_copied(), 2);
  std::vector<float> want = NaiveMlp(mlp, x);
  std::vector<float> got = Read(*out);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i])));
  }

  sched->Reset();
  EXPECT_EQ(sched->GetTensorStream(relu), nullptr);
  EXPECT_EQ(sched->GetTensorAsync(*out, got.data(), 0, 4).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerTest, CreateRejectsBadArguments) {
  auto code = [](absl::StatusOr<std::unique_ptr<Scheduler>> s) {
    return s.status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(Scheduler::Create({}, {}, {})), kInvalid);
  EXPECT_EQ(code(Scheduler::Create({streams_[0].get(), nullptr}, {}, {})),
            kInvalid);
  EXPECT_EQ(
      code(Scheduler::Create({streams_[0].get(), streams_[0].get()}, {}, {})),
      kInvalid);
  EXPECT_EQ(code(Scheduler::Create(CpuStreams(2), {nullptr}, {})), kInvalid);
  EXPECT_EQ(code(Scheduler::Create(CpuStreams(1), {}, {.n_copies = 0})),
            kInvalid);
  EXPECT_EQ(code(Scheduler::Create(CpuStreams(1), {}, {.n_copies = 5})),
            kInvalid);
  EXPECT_EQ(code(Scheduler::Create(CpuStreams(1), {}, {.graph_size = 0})),
            kInvalid);

  PartialDeviceOptions gpu_options;
  gpu_options.ops = {Op::kMulMat};
  PartialDevice gpu(*cpus_[0], gpu_options);
  std::unique_ptr<Stream> gpu_stream = gpu.CreateStream().value();
  EXPECT_EQ(
      code(Scheduler::Create({streams_[1].get(), gpu_stream.get()}, {}, {})),
      kInvalid);
  EXPECT_TRUE(
      Scheduler::Create({gpu_stream.get(), streams_[1].get()}, {}, {}).ok());
}

}  // namespace
}  // namespace tessera
