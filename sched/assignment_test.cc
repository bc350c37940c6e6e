#include "sched/assignment.h"

#include <memory>
#include <string>
#include <vector>

#include "backend/assembly/device_spec.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "backend/alloc/tensor_allocator.h"
#include "gtest/gtest.h"
#include "sched/splits.h"
#include "sched/testing/partial_device.h"

namespace tessera {
namespace {

class AssignmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(AddDevices("cpu:3", 1, registry_).ok());
    for (Device* device : registry_.devices()) {
      streams_.push_back(device->CreateStream().value());
    }
  }

  Device& cpu(int i) { return *registry_.devices()[i]; }

  // The streams of cpu0..cpu{n-1}, each computing in its device's memory.
  StreamSet Streams(int n) {
    std::vector<Stream*> streams;
    std::vector<BufferType*> types;
    for (int i = 0; i < n; ++i) {
      streams.push_back(streams_[i].get());
      types.push_back(&cpu(i).buffer_type());
    }
    return StreamSet(streams, types);
  }

  // A weight of shape `ne` in a WEIGHTS buffer of `device`.
  Tensor* Weight(Device& device, std::vector<int64_t> ne, std::string name) {
    Tensor* w = ctx_.NewTensor(Type::kF32, ne).value();
    w->name = std::move(name);
    Tensor* list[] = {w};
    buffers_.push_back(AllocTensors(device.buffer_type(), list).value());
    buffers_.back()->set_usage(BufferUsage::kWeights);
    return w;
  }

  Tensor* Input(std::vector<int64_t> ne) {
    Tensor* x = ctx_.NewTensor(Type::kF32, ne).value();
    x->name = "x";
    x->flags |= kFlagInput;
    return x;
  }

  static Tensor* Named(Tensor* t, std::string name) {
    t->name = std::move(name);
    return t;
  }

  Registry registry_;
  std::vector<std::unique_ptr<Stream>> streams_;
  Context ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

TEST_F(AssignmentTest, WeightsPlaceOpsAndInputsGoToTheFallback) {
  // cpu0 could read cpu1's host memory, but ops go where the weight is.
  Tensor* x = Input({8, 2});
  Tensor* w0 = Weight(cpu(0), {8, 8}, "w0");
  Tensor* w1 = Weight(cpu(1), {8, 8}, "w1");
  Tensor* h0 = Named(MulMat(ctx_, w0, x).value(), "h0");
  Tensor* h1 = Named(MulMat(ctx_, w1, h0).value(), "h1");
  Graph graph;
  ASSERT_TRUE(graph.Expand(h1).ok());

  StreamSet streams = Streams(3);
  StreamAssignment ids = AssignStreams(graph, {}, streams).value();
  EXPECT_EQ(ids.at(x), 2);
  EXPECT_EQ(ids.at(w0), 0);
  EXPECT_EQ(ids.at(w1), 1);
  EXPECT_EQ(ids.at(h0), 0);
  EXPECT_EQ(ids.at(h1), 1);
}

TEST_F(AssignmentTest, ExpansionSpreadsNonFallbackStreamsFirst) {
  // h0 on cpu0 (weight), relu and scale unassigned, h2 on cpu2 (the
  // fallback's weight): cpu0 spreads down over both.
  Tensor* x = Input({8, 2});
  Tensor* w0 = Weight(cpu(0), {8, 8}, "w0");
  Tensor* w2 = Weight(cpu(2), {8, 8}, "w2");
  Tensor* h0 = Named(MulMat(ctx_, w0, x).value(), "h0");
  Tensor* r = Named(Unary(ctx_, h0, UnaryOp::kRelu).value(), "r");
  Tensor* s = Named(Scale(ctx_, r, 2.0f).value(), "s");
  Tensor* h2 = Named(MulMat(ctx_, w2, s).value(), "h2");
  Tensor* t = Named(Unary(ctx_, h2, UnaryOp::kTanh).value(), "t");
  Graph graph;
  ASSERT_TRUE(graph.Expand(t).ok());

  StreamAssignment ids = AssignStreams(graph, {}, Streams(3)).value();
  EXPECT_EQ(ids.at(r), 0);
  EXPECT_EQ(ids.at(s), 0);
  EXPECT_EQ(ids.at(h2), 2);
  // After the fallback's op nothing non-fallback follows, so the last
  // sweeps give tanh the fallback.
  EXPECT_EQ(ids.at(t), 2);
}

TEST_F(AssignmentTest, ViewsFollowTheirSourceAndPinnedUnsupportedOpsMove) {
  PartialDeviceOptions options;
  options.ops = {Op::kMulMat};
  PartialDevice gpu(cpu(0), options);
  std::unique_ptr<Stream> gpu_stream = gpu.CreateStream().value();
  StreamSet streams({gpu_stream.get(), streams_[1].get()},
                    {&gpu.buffer_type(), &cpu(1).buffer_type()});

  Tensor* x = Input({8, 2});
  Tensor* w = Weight(gpu, {8, 8}, "w");
  Tensor* h = Named(MulMat(ctx_, w, x).value(), "h");
  Tensor* v = Named(Reshape(ctx_, h, {16}).value(), "v");
  Tensor* r = Named(Unary(ctx_, v, UnaryOp::kRelu).value(), "r");
  Graph graph;
  ASSERT_TRUE(graph.Expand(r).ok());

  StreamAssignment pins;
  pins[r] = 0;  // the partial device has no RELU
  pins[v] = 1;  // views follow their source regardless
  StreamAssignment ids = AssignStreams(graph, pins, streams).value();
  EXPECT_EQ(ids.at(h), 0);
  EXPECT_EQ(ids.at(v), 0);
  EXPECT_EQ(ids.at(r), 1);
}

TEST_F(AssignmentTest, ConstantsInReachableMemoryAreReadInPlace) {
  Tensor* x = Input({8, 2});
  Tensor* w = Weight(cpu(1), {8, 8}, "w");
  Tensor* wt = Named(View(ctx_, w, {8, 4}, {w->nb[1]}, 0).value(), "wt");
  Tensor* y = Named(MulMat(ctx_, w, x).value(), "y");
  Tensor* z = Named(MulMat(ctx_, wt, y).value(), "z");
  Graph graph;
  ASSERT_TRUE(graph.Expand(z).ok());
  StreamSet streams = Streams(2);
  StreamAssignment pins;
  pins[y] = 0;
  pins[z] = 0;
  StreamAssignment ids = AssignStreams(graph, pins, streams).value();
  ASSERT_EQ(ids.at(y), 0);
  ASSERT_EQ(ids.at(z), 0);
  // cpu0 computes on cpu1's host memory: neither the weight nor a view of
  // it is copied.
  SplitPlan plan = BuildSplitPlan(graph, ids, streams, /*n_copies=*/1);
  EXPECT_EQ(plan.n_copied, 0);
}

TEST_F(AssignmentTest, SplitPlanShadowsTheGraphAndMakesSlotsPerCopy) {
  Tensor* x = Input({8, 2});
  Tensor* w0 = Weight(cpu(0), {8, 8}, "w0");
  Tensor* w1 = Weight(cpu(1), {8, 8}, "w1");
  Tensor* h0 = Named(MulMat(ctx_, w0, x).value(), "h0");
  Tensor* h1 = Named(MulMat(ctx_, w1, h0).value(), "h1");
  Tensor* y = Named(Add(ctx_, h1, h0).value(), "y");
  Graph graph;
  ASSERT_TRUE(graph.Expand(y).ok());
  StreamSet streams = Streams(2);
  StreamAssignment ids = AssignStreams(graph, {}, streams).value();
  ASSERT_EQ(ids.at(y), 1);

  SplitPlan plan = BuildSplitPlan(graph, ids, streams, /*n_copies=*/3);
  ASSERT_EQ(plan.splits.size(), 2u);
  EXPECT_EQ(plan.splits[0].stream, 0);
  EXPECT_EQ(plan.splits[1].stream, 1);
  // h0 is copied once to cpu1 although h1 and y both read it; x is staged
  // on cpu0.
  EXPECT_EQ(plan.n_copied, 1);
  EXPECT_EQ(plan.n_staged, 1);
  ASSERT_EQ(plan.splits[1].inputs.size(), 1u);
  const SplitInput& input = plan.inputs[plan.splits[1].inputs[0]];
  EXPECT_EQ(input.source, plan.shadow.at(h0));
  EXPECT_EQ(input.source_stream, 0);
  ASSERT_EQ(input.slots.size(), 3u);
  for (const Tensor* slot : input.slots) {
    EXPECT_TRUE(slot->HasFlag(kFlagInput) && slot->HasFlag(kFlagOutput));
    EXPECT_EQ(slot->NumBytes(), h0->NumBytes());
  }
  // The caller's graph is untouched; shadows read the slots.
  EXPECT_EQ(h1->src[1], h0);
  EXPECT_EQ(y->src[1], h0);
  EXPECT_EQ(plan.shadow.at(h1)->src[1], input.slots[0]);
  EXPECT_EQ(plan.shadow.at(y)->src[1], input.slots[0]);
  EXPECT_EQ(plan.clone_of[2].at(plan.shadow.at(h1))->src[1], input.slots[2]);
  EXPECT_EQ(plan.original.at(plan.clone_of[1].at(plan.shadow.at(y))), y);
  // A copy's graph is closed: y's clone reads h1's clone of the same copy.
  EXPECT_EQ(plan.clone_of[2].at(plan.shadow.at(y))->src[0],
            plan.clone_of[2].at(plan.shadow.at(h1)));
  // Weights keep their data in the shadows.
  EXPECT_EQ(plan.shadow.at(w1)->data, w1->data);
  EXPECT_EQ(plan.shadow.at(h0)->data, nullptr);
}

}  // namespace
}  // namespace tessera
