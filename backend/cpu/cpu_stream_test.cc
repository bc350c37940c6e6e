#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/simd_level.h"
#include "backend/testing/gate_event.h"
#include "backend/testing/thread_count.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using testing::GateEvent;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

CpuDeviceOptions Options(const char* name, int n_threads) {
  return {.name = name, .n_threads = n_threads, .memory_limit = 0};
}

// Every tensor of `graph`, for AllocTensors.
std::vector<Tensor*> TensorsOf(const Graph& graph) {
  std::vector<Tensor*> all(graph.leafs().begin(), graph.leafs().end());
  all.insert(all.end(), graph.nodes().begin(), graph.nodes().end());
  return all;
}

// Deterministic values in [-1, 1).
std::vector<float> Pattern(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

std::vector<float> ReadF32(const Tensor& t) {
  std::vector<float> out(t.NumElements());
  EXPECT_TRUE(
      t.buffer->GetTensor(t, out.data(), 0, out.size() * sizeof(float)).ok());
  return out;
}

// z = (2x + 1) + x = 3x + 1 for an F32 x of shape `ne`, allocated on
// `device` by Build.
struct ThreeXPlusOne {
  void Build(CpuDevice& device, absl::Span<const int64_t> ne) {
    x = ctx.NewTensor(Type::kF32, ne).value();
    Tensor* y = Scale(ctx, x, 2.0f, 1.0f).value();
    z = Add(ctx, y, x).value();
    ASSERT_TRUE(graph.Expand(z).ok());
    buffer = AllocTensors(device.buffer_type(), TensorsOf(graph)).value();
  }

  Context ctx;
  Tensor* x = nullptr;
  Tensor* z = nullptr;
  Graph graph;
  std::unique_ptr<Buffer> buffer;
};

TEST(CpuStreamTest, RunsSetComputeGetInOrder) {
  CpuDevice device(Options("cpu0", 2));
  ThreeXPlusOne g;
  ASSERT_NO_FATAL_FAILURE(g.Build(device, {8, 4}));
  std::unique_ptr<Stream> stream = device.CreateStream().value();

  // Two rounds queued back to back: each Get must see its own Set.
  std::vector<float> in1(32), in2(32), out1(32), out2(32);
  for (int i = 0; i < 32; ++i) {
    in1[i] = 0.5f * i - 3.0f;
    in2[i] = -0.25f * i;
  }
  const size_t bytes = 32 * sizeof(float);
  ASSERT_TRUE(stream->SetTensorAsync(*g.x, in1.data(), 0, bytes).ok());
  ASSERT_TRUE(stream->ComputeAsync(g.graph).ok());
  ASSERT_TRUE(stream->GetTensorAsync(*g.z, out1.data(), 0, bytes).ok());
  ASSERT_TRUE(stream->SetTensorAsync(*g.x, in2.data(), 0, bytes).ok());
  ASSERT_TRUE(stream->ComputeAsync(g.graph).ok());
  ASSERT_TRUE(stream->GetTensorAsync(*g.z, out2.data(), 0, bytes).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  for (int i = 0; i < 32; ++i) {
    EXPECT_FLOAT_EQ(out1[i], 3.0f * in1[i] + 1.0f) << i;
    EXPECT_FLOAT_EQ(out2[i], 3.0f * in2[i] + 1.0f) << i;
  }
}

// A caller stream's work is done when the call that queues it returns, on
// the calling thread (with a team of 2: the caller and one helper).
TEST(CpuStreamTest, ACallerStreamRunsTheWorkBeforeTheCallReturns) {
  CpuDevice device(Options("cpu0", 2));
  ThreeXPlusOne g;
  ASSERT_NO_FATAL_FAILURE(g.Build(device, {64, 64}));
  std::unique_ptr<Stream> stream = device.CreateCallerStream().value();
  std::unique_ptr<Event> done = device.CreateEvent().value();

  const std::vector<float> in = Pattern(64 * 64, 3);
  std::vector<float> out(64 * 64);
  const size_t bytes = in.size() * sizeof(float);
  ASSERT_TRUE(stream->SetTensorAsync(*g.x, in.data(), 0, bytes).ok());
  ASSERT_TRUE(stream->ComputeAsync(g.graph).ok());
  ASSERT_TRUE(stream->GetTensorAsync(*g.z, out.data(), 0, bytes).ok());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_FLOAT_EQ(out[i], 3.0f * in[i] + 1.0f) << i;
  }
  ASSERT_TRUE(stream->RecordEvent(*done).ok());
  EXPECT_TRUE(done->IsDone());
  EXPECT_TRUE(stream->Synchronize().ok());
}

TEST(CpuStreamTest, PartialSetAndGetUseTheOffset) {
  CpuDevice device(Options("cpu0", 1));
  Context ctx;
  Tensor* x = ctx.NewTensor(Type::kF32, {6}).value();
  std::unique_ptr<Buffer> buffer =
      AllocTensors(device.buffer_type(), {x}).value();
  ASSERT_TRUE(buffer->Clear(0).ok());
  std::unique_ptr<Stream> stream = device.CreateStream().value();
  const float two[2] = {7.0f, 8.0f};
  float back[3] = {};
  ASSERT_TRUE(stream->SetTensorAsync(*x, two, 3 * sizeof(float), 8).ok());
  ASSERT_TRUE(stream->GetTensorAsync(*x, back, 2 * sizeof(float), 12).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(back[0], 0.0f);
  EXPECT_EQ(back[1], 7.0f);
  EXPECT_EQ(back[2], 8.0f);
}

TEST(CpuStreamTest, EventsOrderWorkAcrossDevices) {
  CpuDevice dev_a(Options("cpu0", 2));
  CpuDevice dev_b(Options("cpu1", 2));
  Context ctx;
  Tensor* x = ctx.NewTensor(Type::kF32, {16, 3}).value();
  Tensor* y = Scale(ctx, x, 2.0f).value();
  Tensor* z = Add(ctx, y, y).value();
  Graph graph_a;
  ASSERT_TRUE(graph_a.Expand(y).ok());
  // z on the second device reads y from the first device's memory.
  Graph graph_b;
  graph_b.AddLeaf(y);
  graph_b.AddNode(z);
  std::unique_ptr<Buffer> buffer_a =
      AllocTensors(dev_a.buffer_type(), {x, y}).value();
  std::unique_ptr<Buffer> buffer_b =
      AllocTensors(dev_b.buffer_type(), {z}).value();
  ASSERT_TRUE(buffer_b->Clear(0xFF).ok());

  std::unique_ptr<Stream> stream_a = dev_a.CreateStream().value();
  std::unique_ptr<Stream> stream_b = dev_b.CreateStream().value();
  std::unique_ptr<Event> done_a = dev_a.CreateEvent().value();
  std::unique_ptr<Event> done_b = dev_b.CreateEvent().value();
  GateEvent gate(dev_a);

  const std::vector<float> in = Pattern(48, 1);
  std::vector<float> out(48, 0.0f);
  ASSERT_TRUE(stream_a->WaitEvent(gate).ok());
  ASSERT_TRUE(stream_a->SetTensorAsync(*x, in.data(), 0, 48 * 4).ok());
  ASSERT_TRUE(stream_a->ComputeAsync(graph_a).ok());
  ASSERT_TRUE(stream_a->RecordEvent(*done_a).ok());
  ASSERT_TRUE(stream_b->WaitEvent(*done_a).ok());
  ASSERT_TRUE(stream_b->ComputeAsync(graph_b).ok());
  ASSERT_TRUE(stream_b->RecordEvent(*done_b).ok());
  ASSERT_TRUE(stream_b->GetTensorAsync(*z, out.data(), 0, 48 * 4).ok());

  // Nothing can run while the gate is closed.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done_a->IsDone());
  EXPECT_FALSE(done_b->IsDone());
  float first = 0.0f;
  ASSERT_TRUE(buffer_b->GetTensor(*z, &first, 0, sizeof(first)).ok());
  EXPECT_TRUE(std::isnan(first));  // still the 0xFF fill

  gate.Open();
  ASSERT_TRUE(done_b->Synchronize().ok());
  EXPECT_TRUE(done_a->IsDone());
  EXPECT_TRUE(done_b->IsDone());
  ASSERT_TRUE(stream_b->Synchronize().ok());
  for (int i = 0; i < 48; ++i) EXPECT_FLOAT_EQ(out[i], 4.0f * in[i]) << i;
}

TEST(CpuStreamTest, WaitsForTheRecordingCurrentWhenTheWaitWasQueued) {
  CpuDevice device(Options("cpu0", 1));
  std::unique_ptr<Stream> stream = device.CreateStream().value();
  GateEvent gate(device);
  ASSERT_TRUE(stream->WaitEvent(gate).ok());
  // The event is recorded again (as a pipelined schedule does) before the
  // first recording completes; the queued wait is for the first only.
  gate.Record();
  gate.Open(0);
  absl::Notification synchronized;
  std::thread waiter([&] {
    EXPECT_TRUE(stream->Synchronize().ok());
    synchronized.Notify();
  });
  EXPECT_TRUE(synchronized.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "the wait is for the later recording";
  gate.Open(1);
  waiter.join();
}

TEST(CpuStreamTest, UnrecordedEventIsDoneAndWaitingOnItIsANoOp) {
  CpuDevice device(Options("cpu0", 1));
  std::unique_ptr<Stream> stream = device.CreateStream().value();
  std::unique_ptr<Event> event = device.CreateEvent().value();
  EXPECT_TRUE(event->IsDone());
  EXPECT_TRUE(event->Synchronize().ok());
  ASSERT_TRUE(stream->WaitEvent(*event).ok());
  ASSERT_TRUE(stream->RecordEvent(*event).ok());
  EXPECT_TRUE(event->Synchronize().ok());
  EXPECT_TRUE(stream->Synchronize().ok());
}

TEST(CpuStreamTest, KernelErrorIsStickyAndReachesEvents) {
  CpuDevice device(Options("cpu0", 2));
  CpuDevice other(Options("cpu1", 1));
  Context ctx;
  Tensor* a = ctx.NewTensor(Type::kF32, {4, 3}).value();
  Tensor* rows = ctx.NewTensor(Type::kI32, {2}).value();
  Tensor* got = GetRows(ctx, a, rows).value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(got).ok());
  std::unique_ptr<Buffer> buffer =
      AllocTensors(device.buffer_type(), TensorsOf(graph)).value();
  std::unique_ptr<Stream> stream = device.CreateStream().value();
  std::unique_ptr<Event> before = device.CreateEvent().value();
  std::unique_ptr<Event> after = device.CreateEvent().value();

  const std::vector<float> values = Pattern(12, 2);
  const int32_t bad_rows[2] = {0, 7};  // row 7 of 3 does not exist
  ASSERT_TRUE(stream->SetTensorAsync(*a, values.data(), 0, 48).ok());
  ASSERT_TRUE(stream->SetTensorAsync(*rows, bad_rows, 0, 8).ok());
  ASSERT_TRUE(stream->RecordEvent(*before).ok());
  ASSERT_TRUE(stream->ComputeAsync(graph).ok());  // fails when it runs
  ASSERT_TRUE(stream->RecordEvent(*after).ok());
  // Skipped: queued after the failure.
  const std::vector<float> zeros(12, 0.0f);
  ASSERT_TRUE(stream->SetTensorAsync(*a, zeros.data(), 0, 48).ok());

  const absl::Status status = stream->Synchronize();
  EXPECT_EQ(status.code(), kInvalid) << status;
  EXPECT_NE(status.message().find("cpu0"), std::string::npos) << status;
  EXPECT_TRUE(before->Synchronize().ok());
  EXPECT_EQ(after->Synchronize(), status);
  EXPECT_EQ(ReadF32(*a), values);
  // Later work keeps failing with the first error.
  ASSERT_TRUE(stream->ComputeAsync(graph).ok());
  EXPECT_EQ(stream->Synchronize(), status);

  // A stream of another device waiting on the failed event fails too.
  std::unique_ptr<Stream> waiter = other.CreateStream().value();
  ASSERT_TRUE(waiter->WaitEvent(*after).ok());
  const absl::Status propagated = waiter->Synchronize();
  EXPECT_EQ(propagated.code(), kInvalid) << propagated;
  EXPECT_NE(propagated.message().find("cpu1"), std::string::npos) << propagated;
}

// Computes `graph` (inputs already set) on a new stream of `device`.
absl::Status ComputeOn(CpuDevice& device, const Graph& graph) {
  absl::StatusOr<std::unique_ptr<Stream>> stream = device.CreateStream();
  if (!stream.ok()) return stream.status();
  return (*stream)->Compute(graph);
}

// A graph of one MUL_MAT, weights `a` of `type` (k x m) times F32 `b`
// (k x n), every tensor in one buffer of `device`.
struct OneProduct {
  Context ctx;
  Tensor* a;
  Tensor* b;
  Tensor* mm;
  Graph graph;
  std::unique_ptr<Buffer> buffer;

  OneProduct(Device& device, Type type, int64_t k, int64_t m, int64_t n) {
    a = ctx.NewTensor(type, {k, m}).value();
    b = ctx.NewTensor(Type::kF32, {k, n}).value();
    mm = MulMat(ctx, a, b).value();
    EXPECT_TRUE(graph.Expand(mm).ok());
    buffer = AllocTensors(device.buffer_type(), TensorsOf(graph)).value();
  }
};

TEST(CpuStreamTest, ThreadedComputeMatchesSingleThread) {
  CpuDevice one(Options("cpu0", 1));
  CpuDevice three(Options("cpu1", 3));
  Context ctx;
  constexpr int kK = 64, kM = 37, kN = 29;
  Tensor* a = ctx.NewTensor(Type::kF32, {kK, kM}).value();
  Tensor* b = ctx.NewTensor(Type::kF32, {kK, kN}).value();
  Tensor* bias = ctx.NewTensor(Type::kF32, {kM}).value();
  Tensor* mm = MulMat(ctx, a, b).value();
  Tensor* sm = SoftMax(ctx, mm, nullptr, 0.5f, 0.0f).value();
  Tensor* norm = RmsNorm(ctx, sm, 1e-5f).value();
  Tensor* gelu = Unary(ctx, norm, UnaryOp::kGelu).value();
  Tensor* biased = Add(ctx, gelu, bias).value();
  Tensor* sums = SumRows(ctx, biased).value();
  Tensor* order = Argsort(ctx, biased, SortOrder::kDescending).value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(sums).ok());
  ASSERT_TRUE(graph.Expand(order).ok());
  // Allocated on `one`; `three` computes on the same host memory.
  std::unique_ptr<Buffer> buffer =
      AllocTensors(one.buffer_type(), TensorsOf(graph)).value();

  const std::vector<float> va = Pattern(kK * kM, 3);
  const std::vector<float> vb = Pattern(kK * kN, 4);
  const std::vector<float> vbias = Pattern(kM, 5);
  auto set_inputs = [&] {
    ASSERT_TRUE(buffer->Clear(0).ok());
    ASSERT_TRUE(buffer->SetTensor(*a, va.data(), 0, va.size() * 4).ok());
    ASSERT_TRUE(buffer->SetTensor(*b, vb.data(), 0, vb.size() * 4).ok());
    ASSERT_TRUE(
        buffer->SetTensor(*bias, vbias.data(), 0, vbias.size() * 4).ok());
  };
  std::vector<std::vector<uint8_t>> results[2];
  CpuDevice* devices[2] = {&one, &three};
  for (int d = 0; d < 2; ++d) {
    set_inputs();
    ASSERT_TRUE(ComputeOn(*devices[d], graph).ok());
    for (Tensor* node : graph.nodes()) {
      std::vector<uint8_t> bytes(node->NumBytes());
      ASSERT_TRUE(buffer->GetTensor(*node, bytes.data(), 0, bytes.size()).ok());
      results[d].push_back(std::move(bytes));
    }
  }
  // F32 nodes agree to float rounding (OpenBLAS blocks a product
  // differently when the team splits its rows); I32 nodes exactly.
  ASSERT_EQ(results[0].size(), graph.nodes().size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    const Tensor& node = *graph.nodes()[i];
    if (node.type != Type::kF32) {
      EXPECT_EQ(results[0][i], results[1][i]) << Describe(node);
      continue;
    }
    ASSERT_EQ(results[0][i].size(), results[1][i].size());
    const size_t n = results[0][i].size() / sizeof(float);
    std::vector<float> x(n), y(n);
    std::memcpy(x.data(), results[0][i].data(), n * sizeof(float));
    std::memcpy(y.data(), results[1][i].data(), n * sizeof(float));
    for (size_t j = 0; j < n; ++j) {
      EXPECT_NEAR(x[j], y[j], 1e-5f * (1.0f + std::abs(x[j])))
          << Describe(node) << " element " << j;
    }
  }

  // The first op against a direct computation.
  const std::vector<float> got = ReadF32(*mm);
  for (int j = 0; j < kN; ++j) {
    for (int i = 0; i < kM; ++i) {
      double dot = 0;
      for (int k = 0; k < kK; ++k) {
        dot += static_cast<double>(va[i * kK + k]) * vb[j * kK + k];
      }
      EXPECT_NEAR(got[j * kM + i], dot, 1e-4 * (1 + std::abs(dot)));
    }
  }
}

// A NaN or an infinity among the activations of a quantized product comes
// out as non-finite values in that column only (NaN for a NaN, as float
// products give), at every SIMD level, never as a rounding of garbage.
TEST(CpuStreamTest, QuantizedProductsCarryNonFiniteActivations) {
  constexpr int kK = 512, kM = 6, kN = 3;
  for (SimdLevel level : SupportedSimdLevels()) {
    for (Type type : {Type::kQ8_0, Type::kQ4_0, Type::kQ4_K, Type::kQ6_K}) {
      SCOPED_TRACE(absl::StrCat(std::string(SimdLevelName(level)), " ",
                                std::string(TypeName(type))));
      CpuDevice device({.name = "cpu0", .n_threads = 2, .max_simd = level});
      OneProduct p(device, type, kK, kM, kN);
      const std::vector<float> wa = Pattern(kK * kM, 7);
      std::vector<uint8_t> qa(p.a->NumBytes());
      RowFromFloat(type, wa.data(), qa.data(), kK * kM);
      ASSERT_TRUE(p.buffer->SetTensor(*p.a, qa.data(), 0, qa.size()).ok());
      std::vector<float> vb = Pattern(kK * kN, 8);
      vb[0 * kK + 300] = std::numeric_limits<float>::quiet_NaN();
      vb[1 * kK + 17] = std::numeric_limits<float>::infinity();
      ASSERT_TRUE(p.buffer->SetTensor(*p.b, vb.data(), 0, vb.size() * 4).ok());
      ASSERT_TRUE(ComputeOn(device, p.graph).ok());
      const std::vector<float> got = ReadF32(*p.mm);
      for (int i = 0; i < kM; ++i) {
        EXPECT_TRUE(std::isnan(got[0 * kM + i])) << "row " << i;
        EXPECT_FALSE(std::isfinite(got[1 * kM + i])) << "row " << i;
        EXPECT_TRUE(std::isfinite(got[2 * kM + i])) << "row " << i;
      }
    }
  }
}

TEST(CpuStreamTest, HundredSmallNodes) {
  CpuDevice device(Options("cpu0", 2));
  Context ctx;
  constexpr int kN = 16;
  Tensor* x = ctx.NewTensor(Type::kF32, {kN}).value();
  Tensor* t = x;
  for (int i = 0; i < 100; ++i) {
    t = (i % 2 == 0) ? Add(ctx, t, x).value() : Scale(ctx, t, 0.5f).value();
  }
  Graph graph;
  ASSERT_TRUE(graph.Expand(t).ok());
  ASSERT_EQ(graph.nodes().size(), 100u);
  std::unique_ptr<Buffer> buffer =
      AllocTensors(device.buffer_type(), TensorsOf(graph)).value();
  std::unique_ptr<Stream> stream = device.CreateStream().value();

  for (uint32_t round = 0; round < 10; ++round) {
    const std::vector<float> in = Pattern(kN, 10 + round);
    std::vector<float> out(kN);
    ASSERT_TRUE(stream->SetTensorAsync(*x, in.data(), 0, kN * 4).ok());
    ASSERT_TRUE(stream->ComputeAsync(graph).ok());
    ASSERT_TRUE(stream->GetTensorAsync(*t, out.data(), 0, kN * 4).ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    for (int e = 0; e < kN; ++e) {
      float want = in[e];
      for (int i = 0; i < 100; ++i) {
        want = (i % 2 == 0) ? want + in[e] : want * 0.5f;
      }
      EXPECT_FLOAT_EQ(out[e], want) << round << " " << e;
    }
  }
}

// Streams cost threads only while in use: 200 streams of a 2-thread
// device, each having computed a product split over its worker and a
// helper, leave the process with the threads it had once they have idled
// past their linger, though they all still exist.
TEST(CpuStreamTest, IdleStreamsCostNoThreads) {
  CpuDevice device(Options("cpu0", 2));
  // 37 x 29 outputs of 64 products: worth splitting (CpuIsParallelWorthy).
  constexpr int kK = 64, kM = 37, kN = 29;
  OneProduct p(device, Type::kF32, kK, kM, kN);
  Graph& graph = p.graph;
  Tensor* mm = p.mm;
  const std::vector<float> va = Pattern(kK * kM, 6);
  const std::vector<float> vb = Pattern(kK * kN, 7);
  ASSERT_TRUE(p.buffer->SetTensor(*p.a, va.data(), 0, va.size() * 4).ok());
  ASSERT_TRUE(p.buffer->SetTensor(*p.b, vb.data(), 0, vb.size() * 4).ok());
  std::vector<double> want(kM * kN);
  for (int j = 0; j < kN; ++j) {
    for (int i = 0; i < kM; ++i) {
      for (int k = 0; k < kK; ++k) {
        want[j * kM + i] +=
            static_cast<double>(va[i * kK + k]) * vb[j * kK + k];
      }
    }
  }
  // The kernels' own first-use setup happens before the baseline.
  ASSERT_TRUE(ComputeOn(device, graph).ok());

  const int baseline = testing::ThreadCount(getpid());
  ASSERT_GT(baseline, 0);
  constexpr int kStreams = 200;
  std::vector<std::unique_ptr<Stream>> streams;
  int peak = baseline;
  for (int s = 0; s < kStreams; ++s) {
    streams.push_back(device.CreateStream().value());
    std::vector<float> got(kM * kN, 0.0f);
    ASSERT_TRUE(streams.back()->ComputeAsync(graph).ok());
    ASSERT_TRUE(streams.back()
                    ->GetTensorAsync(*mm, got.data(), 0, got.size() * 4)
                    .ok());
    ASSERT_TRUE(streams.back()->Synchronize().ok());
    peak = std::max(peak, testing::ThreadCount(getpid()));
    for (int e = 0; e < kM * kN; ++e) {
      ASSERT_NEAR(got[e], want[e], 1e-4 * (1 + std::abs(want[e])))
          << "stream " << s << " element " << e;
    }
  }
  // A stream that has just computed holds its worker and its helper.
  EXPECT_GE(peak, baseline + 2);
  EXPECT_EQ(testing::WaitForThreadCount(getpid(), baseline, absl::Seconds(10)),
            baseline)
      << kStreams << " idle streams";
  // An idle stream computes again as before.
  std::vector<float> got(kM * kN, 0.0f);
  ASSERT_TRUE(streams.front()->ComputeAsync(graph).ok());
  ASSERT_TRUE(
      streams.front()->GetTensorAsync(*mm, got.data(), 0, got.size() * 4).ok());
  ASSERT_TRUE(streams.front()->Synchronize().ok());
  EXPECT_NEAR(got[0], want[0], 1e-4 * (1 + std::abs(want[0])));
}

TEST(CpuStreamTest, RejectsBadArgumentsWhenQueued) {
  CpuDevice device(Options("cpu0", 1));
  CpuDevice other(Options("cpu1", 1));
  Context ctx;
  Tensor* x = ctx.NewTensor(Type::kF32, {4}).value();
  Tensor* y = Unary(ctx, x, UnaryOp::kRelu).value();
  Tensor* small = ctx.NewTensor(Type::kF32, {3}).value();
  Tensor* loose = Sqr(ctx, ctx.NewTensor(Type::kF32, {4}).value()).value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(y).ok());
  std::unique_ptr<Buffer> buffer =
      AllocTensors(device.buffer_type(), {x, y, small}).value();
  std::unique_ptr<Stream> stream = device.CreateStream().value();
  float data[8] = {};

  EXPECT_EQ(stream->SetTensorAsync(*x, data, 4, 16).code(), kInvalid);
  EXPECT_EQ(stream->GetTensorAsync(*x, data, 16, 1).code(), kInvalid);
  EXPECT_EQ(stream->SetTensorAsync(*x, nullptr, 0, 4).code(), kInvalid);
  EXPECT_EQ(stream->SetTensorAsync(*loose, data, 0, 4).code(), kInvalid);
  EXPECT_EQ(stream->CopyTensorAsync(*x, *small).code(), kInvalid);
  EXPECT_EQ(stream->CopyTensorAsync(*loose, *x).code(), kInvalid);

  // Unallocated tensors.
  Graph unallocated;
  ASSERT_TRUE(unallocated.Expand(loose).ok());
  EXPECT_EQ(stream->ComputeAsync(unallocated).code(), kInvalid);

  // An op value outside the enum and a unary op that does not exist.
  y->op = static_cast<Op>(999);
  EXPECT_FALSE(device.SupportsOp(*y));
  EXPECT_EQ(stream->ComputeAsync(graph).code(), kInvalid);
  y->op = Op::kUnary;
  y->op_params[0] = 99;
  EXPECT_FALSE(device.SupportsOp(*y));
  EXPECT_EQ(stream->ComputeAsync(graph).code(), kInvalid);
  y->op_params[0] = static_cast<int32_t>(UnaryOp::kRelu);
  EXPECT_TRUE(device.SupportsOp(*y));

  // Events must belong to the stream's device to be recorded.
  std::unique_ptr<Event> foreign = other.CreateEvent().value();
  EXPECT_EQ(stream->RecordEvent(*foreign).code(), kInvalid);

  // Nothing above was queued: the stream is healthy.
  EXPECT_TRUE(stream->Synchronize().ok());
}

TEST(CpuStreamTest, SupportsOpFollowsKernelTypes) {
  CpuDevice device(Options("cpu0", 1));
  Context ctx;
  Tensor* f32 = ctx.NewTensor(Type::kF32, {32, 2}).value();
  Tensor* f16 = ctx.NewTensor(Type::kF16, {32, 2}).value();
  Tensor* q8 = ctx.NewTensor(Type::kQ8_0, {32, 2}).value();
  Tensor* idx = ctx.NewTensor(Type::kI32, {2}).value();
  EXPECT_TRUE(device.SupportsOp(*MulMat(ctx, q8, f32).value()));
  EXPECT_TRUE(device.SupportsOp(*GetRows(ctx, q8, idx).value()));
  EXPECT_TRUE(device.SupportsOp(*Add(ctx, f16, f32).value()));
  EXPECT_TRUE(device.SupportsOp(*Cpy(ctx, q8, f32).value()));
  EXPECT_TRUE(device.SupportsOp(*Transpose(ctx, f32).value()));
  // A hand-made node with a type combination no kernel has.
  Tensor* bad = ctx.NewTensorLike(*Add(ctx, f16, f32).value());
  bad->type = Type::kF32;  // ADD keeps a's type
  EXPECT_FALSE(device.SupportsOp(*bad));
  Tensor* norm = ctx.NewTensorLike(*RmsNorm(ctx, f32, 1e-6f).value());
  norm->src[0] = f16;  // RMS_NORM is F32 only
  EXPECT_FALSE(device.SupportsOp(*norm));
}

TEST(CpuStreamTest, CopiesAcrossDevicesAndDrainsOnDestruction) {
  CpuDevice dev_a(Options("cpu0", 1));
  CpuDevice dev_b(Options("cpu1", 2));
  Context ctx;
  Tensor* src = ctx.NewTensor(Type::kF32, {5, 2}).value();
  Tensor* dst = ctx.NewTensor(Type::kF32, {10}).value();
  std::unique_ptr<Buffer> buffer_a =
      AllocTensors(dev_a.buffer_type(), {src}).value();
  std::unique_ptr<Buffer> buffer_b =
      AllocTensors(dev_b.buffer_type(), {dst}).value();
  const std::vector<float> in = Pattern(10, 6);
  std::vector<float> out(10, 0.0f);
  {
    std::unique_ptr<Stream> stream = dev_b.CreateStream().value();
    ASSERT_TRUE(stream->SetTensorAsync(*src, in.data(), 0, 40).ok());
    ASSERT_TRUE(stream->CopyTensorAsync(*src, *dst).ok());
    ASSERT_TRUE(stream->GetTensorAsync(*dst, out.data(), 0, 40).ok());
    // Destroyed without Synchronize: the queue still runs to the end.
  }
  EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace tessera
