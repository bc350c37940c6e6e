#include "backend/meta/meta_device.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/comm/host_communicator.h"
#include "backend/cpu/cpu_registry.h"
#include "backend/meta/llama_policy.h"
#include "backend/meta/meta_stream.h"
#include "backend/registry.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/type.h"
#include "gtest/gtest.h"
#include "sched/scheduler.h"
#include "sched/testing/models.h"

namespace tessera {
namespace {

using testing::Mlp;
using testing::MlpInput;
using testing::Nmse;
using testing::NaiveMlp;
using testing::Weights;

// Column-parallel even layers, row-parallel odd layers (Megatron MLP).
SplitPolicy MlpPolicy(int n) {
  return [n](const Tensor& t) -> SplitState {
    if (t.name.size() < 2) return SplitState::Mirrored();
    const int layer = std::stoi(t.name.substr(1));
    if (t.name[0] == 'w') {
      const int axis = layer % 2 == 0 ? 1 : 0;
      return SplitState::Even(axis, t.ne[axis], n).value();
    }
    if (t.name[0] == 'b' && layer % 2 == 0) {
      return SplitState::Even(0, t.ne[0], n).value();
    }
    return SplitState::Mirrored();
  };
}

// N CPU members (one thread each), their communicator and a meta device
// over them, plus `extra` plain CPU devices.
struct Tp {
  Registry registry;
  std::vector<Device*> cpus;
  std::vector<std::unique_ptr<HostCommunicator>> comms;
  std::vector<std::unique_ptr<MetaDevice>> metas;

  Tp(int n, int groups, int extra, std::function<SplitPolicy(int)> policy) {
    EXPECT_TRUE(AddCpuDevices(n * groups + extra, 1, registry).ok());
    cpus.assign(registry.devices().begin(), registry.devices().end());
    for (int g = 0; g < groups; ++g) {
      std::vector<Device*> members(cpus.begin() + g * n,
                                   cpus.begin() + (g + 1) * n);
      comms.push_back(HostCommunicator::Create(members).value());
      metas.push_back(MetaDevice::Create("tp" + std::to_string(g), members,
                                         *comms.back(), policy(n))
                          .value());
    }
  }
  MetaDevice& meta(int g = 0) { return *metas[g]; }
  Device& extra(int i) { return *cpus[cpus.size() - 1 - i]; }
};

std::vector<float> Iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i) - 7.0f;
  return v;
}

TEST(MetaDeviceTest, CreateChecksArguments) {
  Registry registry;
  ASSERT_TRUE(AddCpuDevices(3, 1, registry).ok());
  std::vector<Device*> two = {registry.devices()[0], registry.devices()[1]};
  auto comm = HostCommunicator::Create(two).value();
  EXPECT_EQ(
      MetaDevice::Create("m", {}, *comm, MirroredPolicy()).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetaDevice::Create("m", {two[0], two[0]}, *comm, MirroredPolicy())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetaDevice::Create("m", {two[1], two[0]}, *comm, MirroredPolicy())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetaDevice::Create("m", two, *comm, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto meta = MetaDevice::Create("m", two, *comm, MirroredPolicy()).value();
  EXPECT_EQ(meta->Props().type, DeviceType::kMeta);
  EXPECT_TRUE(meta->Props().caps.events);
}

// Weights named by their layout: "a0" split on axis 0 unevenly, "a1" on axis
// 1, "seg" in two segments on axis 0, "m" mirrored, "p" partial.
SplitPolicy LayoutPolicy(int n) {
  return [n](const Tensor& t) -> SplitState {
    if (t.name == "a0") return SplitState::Even(0, t.ne[0], n).value();
    if (t.name == "a1") return SplitState::Even(1, t.ne[1], n).value();
    if (t.name == "seg") {
      const int64_t segs[] = {4, t.ne[0] - 4};
      return SplitState::Segmented(0, segs, n).value();
    }
    if (t.name == "p") return SplitState::Partial();
    return SplitState::Mirrored();
  };
}

// Over members of full size (allocated, then used for weights) and packed
// (allocated as weights).
TEST(MetaDeviceTest, ScatterGatherRoundTrips) {
  for (int run = 0; run < 6; ++run) {
    const int n = 2 + run / 2;
    const bool packed = run % 2 == 1;
    SCOPED_TRACE(packed ? "packed" : "full size");
    Tp tp(n, 1, 0, LayoutPolicy);
    Context ctx;
    std::vector<Tensor*> ts;
    for (const char* name : {"a0", "a1", "seg", "m", "p"}) {
      Tensor* t = ctx.NewTensor(Type::kF32, {10, 5}).value();
      t->name = name;
      ts.push_back(t);
    }
    std::unique_ptr<Buffer> buffer;
    if (packed) {
      buffer = AllocTensors(tp.meta().buffer_type(), ts, BufferUsage::kWeights)
                   .value();
    } else {
      buffer = AllocTensors(tp.meta().buffer_type(), ts).value();
      buffer->set_usage(BufferUsage::kWeights);
    }
    auto* meta_buffer = static_cast<MetaBuffer*>(buffer.get());
    EXPECT_EQ(meta_buffer->packed(), packed);
    std::unique_ptr<Stream> stream = tp.meta().CreateStream().value();
    const std::vector<float> data = Iota(50, 0.5f);
    for (Tensor* t : ts) {
      SCOPED_TRACE(t->name + " over " + std::to_string(n));
      ASSERT_TRUE(buffer->SetTensor(*t, data.data(), 0, 200).ok());
      std::vector<float> back(50);
      ASSERT_TRUE(buffer->GetTensor(*t, back.data(), 0, 200).ok());
      EXPECT_EQ(back, data);
      // A byte range in the middle.
      std::vector<float> part(9, 0.0f);
      ASSERT_TRUE(buffer->GetTensor(*t, part.data(), 44, 36).ok());
      EXPECT_EQ(part, std::vector<float>(data.begin() + 11, data.begin() + 20));
      // The async versions.
      std::vector<float> twice(50);
      for (int i = 0; i < 50; ++i) twice[i] = 2 * data[i];
      ASSERT_TRUE(stream->SetTensorAsync(*t, twice.data(), 0, 200).ok());
      std::vector<float> back2(50);
      ASSERT_TRUE(stream->GetTensorAsync(*t, back2.data(), 0, 200).ok());
      ASSERT_TRUE(stream->Synchronize().ok());
      EXPECT_EQ(back2, twice);
    }
    // Member 1 holds its slice of "a1": columns [5/n ...) of every row.
    SplitState a1 = meta_buffer->StateOf(*ts[1]).value();
    Tensor m1 = meta_buffer->MemberTensor(*ts[1], a1, 1).value();
    EXPECT_EQ(m1.ne[1], a1.MemberExtent(1));
    std::vector<float> slice(m1.NumElements());
    ASSERT_TRUE(meta_buffer->member(1)
                    .GetTensor(m1, slice.data(), 0, m1.NumBytes())
                    .ok());
    const int64_t row0 = a1.Pieces(1)[0].full_offset;
    EXPECT_EQ(slice[0], 2 * data[row0 * 10]);
  }
}

// Weights allocated as such: each member holds its slices and the mirrored
// tensors, nothing of the other members' slices; the buffer is addressed by
// its tensors in their placed states only.
TEST(MetaDeviceTest, PackedWeightsHoldOnlyTheMembersSlices) {
  constexpr int kN = 4;
  Tp tp(kN, 1, 0, LayoutPolicy);
  Context ctx;
  std::vector<Tensor*> ts;
  for (const char* name : {"a0", "a1", "m"}) {
    Tensor* t = ctx.NewTensor(Type::kF32, {256, 64}).value();
    t->name = name;
    ts.push_back(t);
  }
  auto buffer =
      AllocTensors(tp.meta().buffer_type(), ts, BufferUsage::kWeights).value();
  auto* meta_buffer = static_cast<MetaBuffer*>(buffer.get());
  ASSERT_TRUE(meta_buffer->packed());
  const size_t tensor_bytes = 256 * 64 * sizeof(float);
  EXPECT_GE(buffer->size(), 3 * tensor_bytes);
  for (int i = 0; i < kN; ++i) {
    // Two quarters and one whole tensor, plus alignment.
    EXPECT_LE(meta_buffer->member(i).size(),
              tensor_bytes / 2 + tensor_bytes + 1024)
        << "member " << i;
  }
  const std::vector<float> data = Iota(256 * 64, 0.25f);
  for (Tensor* t : ts) {
    ASSERT_TRUE(buffer->SetTensor(*t, data.data(), 0, tensor_bytes).ok());
  }
  for (Tensor* t : ts) {
    std::vector<float> back(data.size());
    ASSERT_TRUE(buffer->GetTensor(*t, back.data(), 0, tensor_bytes).ok());
    EXPECT_EQ(back, data) << t->name;
  }
  // Bytes of a mirrored tensor are addressed as such; others, and tensors
  // it was not laid out for, are refused, not misplaced.
  const size_t m_offset =
      static_cast<char*>(ts[2]->data) - static_cast<char*>(buffer->base());
  const float seven[2] = {7.0f, 7.0f};
  ASSERT_TRUE(buffer->Write(m_offset + 8, seven, 8).ok());
  float got[3];
  ASSERT_TRUE(buffer->Read(m_offset + 4, got, 12).ok());
  EXPECT_EQ(got[0], data[1]);
  EXPECT_EQ(got[1], 7.0f);
  EXPECT_EQ(got[2], 7.0f);
  std::vector<uint8_t> bytes(64);
  EXPECT_EQ(buffer->Write(0, bytes.data(), 64).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(buffer->Read(0, bytes.data(), 64).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(buffer->Read(m_offset + tensor_bytes - 4, bytes.data(), 8).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(meta_buffer->MemberTensor(*ts[0], SplitState::Mirrored(), 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  Tensor inside = *ts[1];
  inside.data = static_cast<char*>(ts[1]->data) + 1024;
  EXPECT_EQ(meta_buffer->MemberTensor(inside, SplitState::Mirrored(), 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Clearing the buffer clears every member.
  ASSERT_TRUE(buffer->Clear(0).ok());
  std::vector<float> back(data.size(), 1.0f);
  ASSERT_TRUE(buffer->GetTensor(*ts[0], back.data(), 0, tensor_bytes).ok());
  EXPECT_EQ(back, std::vector<float>(data.size(), 0.0f));
}

// The split states a buffer records are bounded: past kMaxStates distinct
// tensors a new one is RESOURCE_EXHAUSTED, while known ones still update.
TEST(MetaDeviceTest, RecordedStatesAreBounded) {
  Tp tp(2, 1, 0, LayoutPolicy);
  auto buffer = tp.meta().buffer_type().Alloc(1 << 20).value();
  auto* meta = static_cast<MetaBuffer*>(buffer.get());
  Tensor t;
  t.type = Type::kF32;
  t.buffer = meta;
  t.data = meta->base();
  auto shaped = [&](int64_t k) {
    t.ne[0] = 2 + 2 * (k % 256);
    t.ne[1] = 1 + k / 256;
    ContiguousStrides(t.type, t.ne, t.nb);
    return t;
  };
  for (size_t k = 0; k < MetaBuffer::kMaxStates; ++k) {
    ASSERT_TRUE(
        meta->RecordState(shaped(k), SplitState::Even(0, t.ne[0], 2).value())
            .ok())
        << k;
  }
  EXPECT_EQ(meta->RecordState(shaped(MetaBuffer::kMaxStates),
                              SplitState::Mirrored())
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(meta->RecordState(shaped(7), SplitState::Mirrored()).ok());
  EXPECT_EQ(meta->RecordedState(shaped(7)), SplitState::Mirrored());
}

TEST(MetaDeviceTest, PolicyThatDoesNotFitIsInvalid) {
  Tp tp(2, 1, 0, [](int) {
    return [](const Tensor& t) { return SplitState::Even(0, 3, 2).value(); };
  });
  Context ctx;
  Tensor* t = ctx.NewTensor(Type::kF32, {4}).value();
  auto buffer = AllocTensors(tp.meta().buffer_type(), {t}).value();
  std::vector<float> data(4);
  EXPECT_EQ(buffer->SetTensor(*t, data.data(), 0, 16).code(),
            absl::StatusCode::kInvalidArgument);
  // Packed weights are laid out by the policy's states: refused at once.
  Tensor* w = ctx.NewTensor(Type::kF32, {4}).value();
  EXPECT_EQ(AllocTensors(tp.meta().buffer_type(), {w}, BufferUsage::kWeights)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The MLP's graph with every tensor in one compute buffer of `device`.
struct MlpRun {
  Context ctx;
  Tensor* x;
  Tensor* y;
  Graph graph;
  std::unique_ptr<Buffer> buffer;

  MlpRun(const Mlp& mlp, Device& device) {
    x = testing::NewInput(ctx, Type::kF32, {Mlp::kDim, Mlp::kBatch}, "x")
            .value();
    y = mlp.Forward(ctx, x).value();
    y->flags |= kFlagOutput;
    EXPECT_TRUE(graph.Expand(y).ok());
    std::vector<Tensor*> all = {x};
    for (Tensor* t : graph.nodes()) all.push_back(t);
    buffer = AllocTensors(device.buffer_type(), all).value();
    buffer->set_usage(BufferUsage::kCompute);
  }

  std::vector<float> Run(Stream& stream, const std::vector<float>& in) {
    EXPECT_TRUE(testing::Write(*x, in.data()).ok());
    absl::Status s = stream.Compute(graph);
    EXPECT_TRUE(s.ok()) << s;
    return testing::Read(*y);
  }
};

TEST(MetaDeviceTest, MlpOverMembersEqualsOneDevice) {
  // One device for the reference.
  Registry one;
  ASSERT_TRUE(AddCpuDevices(1, 1, one).ok());
  Weights ref_weights({one.devices()[0]});
  Mlp ref_mlp = Mlp::Make(ref_weights, 4).value();
  ASSERT_TRUE(ref_weights.Upload().ok());
  MlpRun ref_run(ref_mlp, *one.devices()[0]);
  auto ref_stream = one.devices()[0]->CreateStream().value();
  const std::vector<float> want = ref_run.Run(*ref_stream, MlpInput(1));
  EXPECT_LT(Nmse(want, NaiveMlp(ref_mlp, MlpInput(1))), 1e-10);

  for (int n : {2, 3, 4}) {
    SCOPED_TRACE(n);
    Tp tp(n, 1, 0, MlpPolicy);
    Weights weights({&tp.meta()});
    Mlp mlp = Mlp::Make(weights, 4).value();
    ASSERT_TRUE(weights.Upload().ok());
    MlpRun run(mlp, tp.meta());
    auto stream = tp.meta().CreateStream().value();
    auto* meta_stream = static_cast<MetaStream*>(stream.get());
    EXPECT_LT(Nmse(run.Run(*stream, MlpInput(1)), want), 1e-10);
    // Two row-parallel layers: two all-reduces.
    EXPECT_EQ(meta_stream->last_collectives(), 2);
    // Again with another input: the plan is reused.
    const std::vector<float> second = run.Run(*stream, MlpInput(2));
    EXPECT_LT(Nmse(second, ref_run.Run(*ref_stream, MlpInput(2))), 1e-10);
    EXPECT_EQ(meta_stream->plans_derived(), 1);
    // The weights read back whole.
    EXPECT_EQ(testing::Read(*mlp.w[1]), testing::Read(*ref_mlp.w[1]));
  }
}

// Every weight split column-parallel: activations are gathered.
TEST(MetaDeviceTest, ColumnParallelOnlyGathers) {
  for (int n : {2, 3}) {
    SCOPED_TRACE(n);
    Tp tp(n, 1, 0, [](int n) {
      return [n](const Tensor& t) -> SplitState {
        if (t.name[0] == 'w') return SplitState::Even(1, t.ne[1], n).value();
        return SplitState::Mirrored();
      };
    });
    Weights weights({&tp.meta()});
    Mlp mlp = Mlp::Make(weights, 3).value();
    ASSERT_TRUE(weights.Upload().ok());
    MlpRun run(mlp, tp.meta());
    auto stream = tp.meta().CreateStream().value();
    EXPECT_LT(Nmse(run.Run(*stream, MlpInput(3)), NaiveMlp(mlp, MlpInput(3))),
              1e-10);
  }
}

// Attention heads split over members: Q/K/V column parallel on whole
// heads, O and the FFN's down projection row parallel.
SplitPolicy BlockPolicy(int n) {
  using testing::Block;
  return [n](const Tensor& t) -> SplitState {
    if (t.name == "wq" || t.name == "wk" || t.name == "wv") {
      return SplitState::Even(1, t.ne[1], n, Block::kHeadDim).value();
    }
    if (t.name == "wo") {
      return SplitState::Even(0, t.ne[0], n, Block::kHeadDim).value();
    }
    if (t.name == "wg" || t.name == "wu") {
      return SplitState::Even(1, t.ne[1], n).value();
    }
    if (t.name == "wd") return SplitState::Even(0, t.ne[0], n).value();
    return SplitState::Mirrored();
  };
}

// The block's graph with its inputs, every tensor in one compute buffer.
std::vector<float> RunBlock(Device& device, std::vector<Device*> weight_devs,
                            Stream& stream, int* collectives) {
  using testing::Block;
  Weights weights(std::move(weight_devs));
  Block block = Block::Make(weights).value();
  EXPECT_TRUE(weights.Upload().ok());
  Context ctx;
  Tensor* x =
      testing::NewInput(ctx, Type::kF32, {Block::kDim, Block::kTokens}, "x")
          .value();
  Tensor* pos =
      testing::NewInput(ctx, Type::kI32, {Block::kTokens}, "pos").value();
  Tensor* mask = testing::NewInput(ctx, Type::kF32,
                                   {Block::kTokens, Block::kTokens}, "mask")
                     .value();
  Tensor* y = block.Forward(ctx, x, pos, mask, /*flash=*/false).value();
  y->flags |= kFlagOutput;
  Graph graph;
  EXPECT_TRUE(graph.Expand(y).ok());
  std::vector<Tensor*> all = {x, pos, mask};
  for (Tensor* t : graph.nodes()) all.push_back(t);
  auto buffer = AllocTensors(device.buffer_type(), all).value();
  buffer->set_usage(BufferUsage::kCompute);
  testing::BlockInputs in = testing::BlockInputs::Make();
  EXPECT_TRUE(testing::Write(*x, in.x.data()).ok());
  EXPECT_TRUE(testing::Write(*pos, in.pos.data()).ok());
  EXPECT_TRUE(testing::Write(*mask, in.mask.data()).ok());
  absl::Status s = stream.Compute(graph);
  EXPECT_TRUE(s.ok()) << s;
  if (auto* meta = dynamic_cast<MetaStream*>(&stream)) {
    *collectives = meta->last_collectives();
  }
  return testing::Read(*y);
}

TEST(MetaDeviceTest, AttentionBlockSplitByHeads) {
  Registry one;
  ASSERT_TRUE(AddCpuDevices(1, 1, one).ok());
  auto ref_stream = one.devices()[0]->CreateStream().value();
  int unused = 0;
  const std::vector<float> want =
      RunBlock(*one.devices()[0], {one.devices()[0]}, *ref_stream, &unused);
  for (int n : {2, 4}) {
    SCOPED_TRACE(n);
    Tp tp(n, 1, 0, BlockPolicy);
    auto stream = tp.meta().CreateStream().value();
    int collectives = 0;
    const std::vector<float> got =
        RunBlock(tp.meta(), {&tp.meta()}, *stream, &collectives);
    EXPECT_LT(Nmse(got, want), 1e-10);
    // One all-reduce after O, one after the FFN: heads never gathered.
    EXPECT_EQ(collectives, 2);
  }
}

// LLaMA's attention over a KV cache (model/llama.cc's layout): Q/K/V
// projections, K and V written to the cache with SET_ROWS, the cache read
// through views as [head_dim, n_ctx, kv_heads], FLASH_ATTN_EXT under a
// mask, the output projection. Weights and the cache are named as
// LlamaSplitPolicy expects; decoding steps of kStep tokens at a time. The
// cache is placed as the runner places it (BufferUsage::kWeights: a meta
// device packs each member's heads) or, with `packed_cache` false, in a
// plain buffer.
struct CachedAttention {
  static constexpr int64_t kHeadDim = 8;
  static constexpr int64_t kStep = 2;
  static constexpr int64_t kCtx = 8;
  int64_t n_head, n_head_kv, dim, kv_row;
  Context wctx;
  Tensor *wq, *wk, *wv, *wo, *cache_k, *cache_v;
  std::unique_ptr<Buffer> weights, cache, compute;
  Context ctx;
  Tensor *x, *rows, *mask, *y;
  Graph graph;

  CachedAttention(Device& device, int64_t heads, int64_t kv_heads,
                  bool packed_cache = true)
      : n_head(heads),
        n_head_kv(kv_heads),
        dim(kHeadDim * heads),
        kv_row(kHeadDim * kv_heads) {
    auto named = [&](const char* name, int64_t ne0, int64_t ne1,
                     Type type = Type::kF32) {
      Tensor* t = wctx.NewTensor(type, {ne0, ne1}).value();
      t->name = name;
      return t;
    };
    wq = named("blk.0.attn_q.weight", dim, dim);
    wk = named("blk.0.attn_k.weight", dim, kv_row);
    wv = named("blk.0.attn_v.weight", dim, kv_row);
    wo = named("blk.0.attn_output.weight", dim, dim);
    cache_k = named("cache_k.0", kv_row, kCtx, Type::kF16);
    cache_v = named("cache_v.0", kv_row, kCtx, Type::kF16);
    weights = AllocTensors(device.buffer_type(), {wq, wk, wv, wo},
                           BufferUsage::kWeights)
                  .value();
    int k = 0;
    for (Tensor* w : {wq, wk, wv, wo}) {
      std::vector<float> v(w->NumElements());
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = std::sin(0.37f * i + k) / std::sqrt(static_cast<float>(dim));
      }
      EXPECT_TRUE(testing::Write(*w, v.data()).ok());
      ++k;
    }
    cache = AllocTensors(device.buffer_type(), {cache_k, cache_v},
                         packed_cache ? BufferUsage::kWeights
                                      : BufferUsage::kAny)
                .value();
    EXPECT_TRUE(cache->Clear(0).ok());

    x = testing::NewInput(ctx, Type::kF32, {dim, kStep}, "x").value();
    rows = testing::NewInput(ctx, Type::kI32, {kStep}, "rows").value();
    mask = testing::NewInput(ctx, Type::kF16, {kCtx, kStep}, "mask").value();
    Tensor* q = MulMat(ctx, wq, x).value();
    q = Reshape(ctx, q, {kHeadDim, n_head, kStep}).value();
    Tensor* kk = MulMat(ctx, wk, x).value();
    Tensor* vv = MulMat(ctx, wv, x).value();
    Tensor* kc = SetRows(ctx, cache_k, kk, rows).value();
    Tensor* vc = SetRows(ctx, cache_v, vv, rows).value();
    const size_t head_bytes = RowSize(Type::kF16, kHeadDim);
    const size_t row_bytes = RowSize(Type::kF16, kv_row);
    Tensor* kview = View(ctx, kc, {kHeadDim, n_head_kv, kCtx},
                         {head_bytes, row_bytes}, 0)
                        .value();
    Tensor* vview = View(ctx, vc, {kHeadDim, n_head_kv, kCtx},
                         {head_bytes, row_bytes}, 0)
                        .value();
    Tensor* attn = FlashAttnExt(ctx, Permute(ctx, q, 0, 2, 1, 3).value(),
                                Permute(ctx, kview, 0, 2, 1, 3).value(),
                                Permute(ctx, vview, 0, 2, 1, 3).value(), mask,
                                1.0f / std::sqrt(float{kHeadDim}), 0, 0)
                       .value();
    attn = Reshape(ctx, attn, {dim, kStep}).value();
    y = MulMat(ctx, wo, attn).value();
    y->flags |= kFlagOutput;
    EXPECT_TRUE(graph.Expand(y).ok());
    std::vector<Tensor*> all = {x, rows, mask};
    for (Tensor* t : graph.nodes()) all.push_back(t);
    compute = AllocTensors(device.buffer_type(), all).value();
    compute->set_usage(BufferUsage::kCompute);
  }

  std::vector<uint16_t> CacheV() const {
    std::vector<uint16_t> out(cache_v->NumElements());
    EXPECT_TRUE(
        cache_v->buffer->GetTensor(*cache_v, out.data(), 0, out.size() * 2)
            .ok());
    return out;
  }

  // Decoding step `step`: positions step * kStep, ...
  std::vector<float> Step(Stream& stream, int step) {
    std::vector<float> in(x->NumElements());
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = std::cos(0.11f * i + 0.7f * step);
    }
    std::vector<int32_t> pos(kStep);
    std::vector<uint16_t> m(kCtx * kStep);
    for (int64_t t = 0; t < kStep; ++t) {
      pos[t] = static_cast<int32_t>(step * kStep + t);
      for (int64_t j = 0; j < kCtx; ++j) {
        m[t * kCtx + j] = Fp32ToFp16(j <= pos[t] ? 0.0f : -INFINITY);
      }
    }
    EXPECT_TRUE(testing::Write(*x, in.data()).ok());
    EXPECT_TRUE(testing::Write(*rows, pos.data()).ok());
    EXPECT_TRUE(testing::Write(*mask, m.data()).ok());
    absl::Status s = stream.Compute(graph);
    EXPECT_TRUE(s.ok()) << s;
    return testing::Read(*y);
  }
};

TEST(MetaDeviceTest, KvCacheAttentionSplitByHeads) {
  struct Shape {
    int n;
    int64_t heads, kv_heads;
  };
  // GQA (2 query heads per KV head), plain multi-head attention, and one
  // KV head for all query heads (mirrored on every member).
  for (const auto& [shape, packed] :
       {std::pair{Shape{2, 4, 2}, true}, std::pair{Shape{2, 4, 4}, true},
        std::pair{Shape{3, 6, 3}, true}, std::pair{Shape{2, 4, 1}, true},
        std::pair{Shape{4, 4, 1}, true}, std::pair{Shape{2, 4, 2}, false},
        std::pair{Shape{2, 4, 1}, false}}) {
    SCOPED_TRACE(absl::StrCat(shape.n, " members, ", shape.heads, "/",
                              shape.kv_heads, " heads",
                              packed ? "" : ", plain cache buffer"));
    Registry one;
    ASSERT_TRUE(AddCpuDevices(1, 1, one).ok());
    CachedAttention ref(*one.devices()[0], shape.heads, shape.kv_heads);
    auto ref_stream = one.devices()[0]->CreateStream().value();

    Tp tp(shape.n, 1, 0, [&](int n) {
      return LlamaSplitPolicy(
          n, {.head_dim = CachedAttention::kHeadDim,
              .gqa_ratio = shape.heads / shape.kv_heads});
    });
    CachedAttention got(tp.meta(), shape.heads, shape.kv_heads, packed);
    auto stream = tp.meta().CreateStream().value();
    auto* meta_stream = static_cast<MetaStream*>(stream.get());
    // The cache is split by heads, like K and V; one KV head is mirrored.
    const SplitState cache_state =
        static_cast<MetaBuffer*>(got.cache_k->buffer)
            ->StateOf(*got.cache_k)
            .value();
    EXPECT_EQ(cache_state.axis, shape.kv_heads == 1 ? SplitAxis::kMirrored
                                                    : SplitAxis::kAxis0);
    // Placed, each member holds only its heads' rows of the cache (all of
    // a mirrored one), plus alignment.
    auto* cache = static_cast<MetaBuffer*>(got.cache.get());
    EXPECT_EQ(cache->packed(), packed);
    const size_t whole = got.cache_k->NumBytes() + got.cache_v->NumBytes();
    const size_t share = shape.kv_heads == 1 ? whole : whole / shape.n;
    for (int i = 0; packed && i < shape.n; ++i) {
      EXPECT_GE(cache->member(i).size(), share) << "member " << i;
      EXPECT_LE(cache->member(i).size(), share + 1024) << "member " << i;
    }
    for (int step = 0; step < 4; ++step) {
      SCOPED_TRACE(step);
      const std::vector<float> want = ref.Step(*ref_stream, step);
      EXPECT_LT(Nmse(got.Step(*stream, step), want), 1e-10);
      // Only the output projection's partial sums are reduced: the cache
      // and the heads are never gathered.
      EXPECT_EQ(meta_stream->last_collectives(), 1);
    }
    EXPECT_EQ(meta_stream->plans_derived(), 1);
    // The cache reads back whole, equal to one device's.
    EXPECT_EQ(got.CacheV(), ref.CacheV());
  }
}

TEST(MetaDeviceTest, SchedulerRunsMetaStage) {
  Tp tp(2, 1, 1, MlpPolicy);
  Weights weights({&tp.meta()});
  Mlp mlp = Mlp::Make(weights, 4).value();
  ASSERT_TRUE(weights.Upload().ok());
  auto meta_stream = tp.meta().CreateStream().value();
  auto cpu_stream = tp.extra(0).CreateStream().value();
  auto sched =
      Scheduler::Create({meta_stream.get(), cpu_stream.get()}, {}, {}).value();
  Context ctx;
  Tensor* x =
      testing::NewInput(ctx, Type::kF32, {Mlp::kDim, Mlp::kBatch}, "x").value();
  Tensor* y = mlp.Forward(ctx, x).value();
  y->flags |= kFlagOutput;
  Graph graph;
  ASSERT_TRUE(graph.Expand(y).ok());
  ASSERT_TRUE(sched->AllocGraph(graph).ok());
  EXPECT_EQ(sched->GetTensorStream(y), meta_stream.get());
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> in = MlpInput(k);
    ASSERT_TRUE(testing::Write(*x, in.data()).ok());
    absl::Status s = sched->Compute(graph);
    ASSERT_TRUE(s.ok()) << s;
    std::vector<float> out(y->NumElements());
    ASSERT_TRUE(sched->GetTensorAsync(*y, out.data(), 0, y->NumBytes()).ok());
    ASSERT_TRUE(sched->Synchronize().ok());
    EXPECT_LT(Nmse(out, NaiveMlp(mlp, in)), 1e-10);
  }
}

// Two meta stages of two members each (stage s computes MLP s of two
// layers) and a CPU device for the fallback, under one scheduler.
struct TwoMetaStages {
  Tp tp{2, 2, 1, MlpPolicy};
  Weights first{{&tp.meta(0)}};
  Weights second{{&tp.meta(1)}};
  Mlp a = Mlp::Make(first, 2).value();
  Mlp b = Mlp::Make(second, 2).value();
  std::unique_ptr<Stream> s0, s1, cpu;
  std::unique_ptr<Scheduler> sched;

  explicit TwoMetaStages(int n_copies) {
    EXPECT_TRUE(first.Upload().ok());
    EXPECT_TRUE(second.Upload().ok());
    s0 = tp.meta(0).CreateStream().value();
    s1 = tp.meta(1).CreateStream().value();
    cpu = tp.extra(0).CreateStream().value();
    sched = Scheduler::Create({s0.get(), s1.get(), cpu.get()}, {},
                              {.n_copies = n_copies})
                .value();
  }
};

TEST(MetaDeviceTest, TensorTimesPipelineParallel) {
  TwoMetaStages stages(4);
  Mlp& a = stages.a;
  Mlp& b = stages.b;
  Scheduler* sched = stages.sched.get();
  Context ctx;
  Tensor* x =
      testing::NewInput(ctx, Type::kF32, {Mlp::kDim, Mlp::kBatch}, "x").value();
  Tensor* h = a.Forward(ctx, x).value();
  Tensor* y = b.Forward(ctx, h).value();
  y->flags |= kFlagOutput;
  Graph graph;
  ASSERT_TRUE(graph.Expand(y).ok());
  ASSERT_TRUE(sched->AllocGraph(graph).ok());
  EXPECT_EQ(sched->n_splits(), 2);
  constexpr int kBatches = 8;
  std::vector<std::vector<float>> outs(kBatches,
                                       std::vector<float>(y->NumElements()));
  for (int k = 0; k < kBatches; ++k) {
    const std::vector<float> in = MlpInput(k);
    ASSERT_TRUE(testing::Write(*x, in.data()).ok());
    absl::Status s = sched->ComputeAsync(graph);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(
        sched->GetTensorAsync(*y, outs[k].data(), 0, y->NumBytes()).ok());
  }
  ASSERT_TRUE(sched->Synchronize().ok());
  for (int k = 0; k < kBatches; ++k) {
    EXPECT_LT(Nmse(outs[k], NaiveMlp(b, NaiveMlp(a, MlpInput(k)))), 1e-10) << k;
  }
}

// The scheduler's per-copy graphs over meta stages when the graph changes:
// a batch of 8 columns computed on copy 0, then one column at a time, whose
// first compute is on copy 1. Copy 1's graphs must be closed (a clone's
// readers are clones too), else the meta stream derives, and caches, a plan
// in which the readers see the copy-0 node as an input from elsewhere.
TEST(MetaDeviceTest, TensorTimesPipelineParallelSwitchesGraphs) {
  TwoMetaStages stages(2);
  Mlp& a = stages.a;
  Mlp& b = stages.b;
  Scheduler* sched = stages.sched.get();
  struct Built {
    Context ctx;
    Tensor* x = nullptr;
    Tensor* y = nullptr;
    Graph graph;
  };
  auto build = [&](Built& g, int64_t n) {
    g.x = testing::NewInput(g.ctx, Type::kF32, {Mlp::kDim, n}, "x").value();
    g.y = b.Forward(g.ctx, a.Forward(g.ctx, g.x).value()).value();
    g.y->flags |= kFlagOutput;
    ASSERT_TRUE(g.graph.Expand(g.y).ok());
  };
  Built batch, one;
  build(batch, Mlp::kBatch);
  build(one, 1);
  ASSERT_TRUE(sched->Reserve(batch.graph).ok());
  Built* allocated = nullptr;
  auto run = [&](Built& g, const float* in) {
    std::vector<float> out(g.y->NumElements());
    if (allocated != &g) {
      absl::Status s = sched->AllocGraph(g.graph);
      EXPECT_TRUE(s.ok()) << s;
      allocated = &g;
    }
    EXPECT_TRUE(testing::Write(*g.x, in).ok());
    absl::Status s = sched->ComputeAsync(g.graph);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_TRUE(
        sched->GetTensorAsync(*g.y, out.data(), 0, g.y->NumBytes()).ok());
    s = sched->Synchronize();
    EXPECT_TRUE(s.ok()) << s;
    return out;
  };
  const std::vector<float> in = MlpInput(0);
  const std::vector<float> want = NaiveMlp(b, NaiveMlp(a, in));
  EXPECT_LT(Nmse(run(batch, in.data()), want), 1e-10);
  for (int k = 0; k < 4; ++k) {
    SCOPED_TRACE(k);
    const std::vector<float> col_want(want.begin() + k * Mlp::kDim,
                                      want.begin() + (k + 1) * Mlp::kDim);
    EXPECT_LT(Nmse(run(one, in.data() + k * Mlp::kDim), col_want), 1e-10);
  }
}

// A column-parallel product leaves h split on axis 0 at 48 rows; the next
// weight is mirrored and Q8_0 (blocks of 32), so it cannot be sliced at 48:
// h is gathered and the product computed whole, equal to one device.
TEST(MetaDeviceTest, QuantizedWeightIsNotSlicedOffItsBlocks) {
  constexpr int64_t kIn = 64, kHidden = 96, kOut = 32, kTokens = 4;
  Tp tp(2, 1, 1, [](int n) {
    return [n](const Tensor& t) -> SplitState {
      if (t.name == "w0") return SplitState::Even(1, t.ne[1], n, 16).value();
      return SplitState::Mirrored();
    };
  });
  std::vector<float> w0(kIn * kHidden), w1(kHidden * kOut), x(kIn * kTokens);
  for (size_t i = 0; i < w0.size(); ++i) w0[i] = std::sin(0.3f * i) * 0.2f;
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = std::cos(0.7f * i) * 0.2f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.1f * i);
  std::vector<BlockQ8_0> w1q(kHidden * kOut / 32);
  QuantizeRowQ8_0(w1.data(), w1q.data(), kHidden * kOut);

  auto run = [&](Device& device) -> std::vector<float> {
    Context ctx;
    Tensor* a = ctx.NewTensor(Type::kF32, {kIn, kHidden}).value();
    Tensor* b = ctx.NewTensor(Type::kQ8_0, {kHidden, kOut}).value();
    a->name = "w0";
    b->name = "w1";
    auto weights =
        AllocTensors(device.buffer_type(), {a, b}, BufferUsage::kWeights)
            .value();
    EXPECT_TRUE(testing::Write(*a, w0.data()).ok());
    EXPECT_TRUE(testing::Write(*b, w1q.data()).ok());
    Tensor* in = testing::NewInput(ctx, Type::kF32, {kIn, kTokens}, "x").value();
    Tensor* h = MulMat(ctx, a, in).value();
    Tensor* y = MulMat(ctx, b, h).value();
    y->flags |= kFlagOutput;
    Graph graph;
    EXPECT_TRUE(graph.Expand(y).ok());
    auto compute = AllocTensors(device.buffer_type(), {in, h, y}).value();
    compute->set_usage(BufferUsage::kCompute);
    EXPECT_TRUE(testing::Write(*in, x.data()).ok());
    auto stream = device.CreateStream().value();
    absl::Status s = stream->Compute(graph);
    EXPECT_TRUE(s.ok()) << s;
    return testing::Read(*y);
  };
  EXPECT_LT(Nmse(run(tp.meta()), run(tp.extra(0))), 1e-10);
}

TEST(MetaDeviceTest, OpWithoutRuleIsNotSupported) {
  Tp tp(2, 1, 0, MlpPolicy);
  Context ctx;
  Tensor* a = ctx.NewTensor(Type::kF32, {8, 2}).value();
  Tensor* w = ctx.NewTensor(Type::kF32, {8, 4}).value();
  EXPECT_FALSE(
      tp.meta().SupportsOp(*Argsort(ctx, a, SortOrder::kAscending).value()));
  EXPECT_TRUE(tp.meta().SupportsOp(*MulMat(ctx, w, a).value()));
  EXPECT_TRUE(tp.meta().SupportsOp(*RmsNorm(ctx, a, 1e-5f).value()));
}

TEST(MetaDeviceTest, ComputingAnOpWithoutRuleIsUnimplemented) {
  Tp tp(2, 1, 0, MlpPolicy);
  Context ctx;
  Tensor* a = ctx.NewTensor(Type::kF32, {8, 2}).value();
  Tensor* s = Argsort(ctx, a, SortOrder::kAscending).value();
  auto buffer = AllocTensors(tp.meta().buffer_type(), {a, s}).value();
  buffer->set_usage(BufferUsage::kCompute);
  Graph graph;
  ASSERT_TRUE(graph.Expand(s).ok());
  auto stream = tp.meta().CreateStream().value();
  EXPECT_EQ(stream->ComputeAsync(graph).code(),
            absl::StatusCode::kUnimplemented);
}

TEST(MetaDeviceTest, MemberErrorsSurfaceAsStatuses) {
  Tp tp(2, 1, 0, MlpPolicy);
  Context ctx;
  Tensor* table = ctx.NewTensor(Type::kF32, {4, 3}).value();
  Tensor* ids = ctx.NewTensor(Type::kI32, {2}).value();
  Tensor* rows = GetRows(ctx, table, ids).value();
  auto buffer =
      AllocTensors(tp.meta().buffer_type(), {table, ids, rows}).value();
  buffer->set_usage(BufferUsage::kCompute);
  const int32_t bad[2] = {0, 7};
  ASSERT_TRUE(buffer->SetTensor(*ids, bad, 0, sizeof(bad)).ok());
  Graph graph;
  ASSERT_TRUE(graph.Expand(rows).ok());
  auto stream = tp.meta().CreateStream().value();
  auto event = tp.meta().CreateEvent().value();
  ASSERT_TRUE(stream->ComputeAsync(graph).ok());
  ASSERT_TRUE(stream->RecordEvent(*event).ok());
  EXPECT_FALSE(event->Synchronize().ok());
  absl::Status s = stream->Synchronize();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("member 0"), std::string::npos) << s;

  // A tensor outside the meta device's memory.
  Context other;
  Tensor* t = other.NewTensor(Type::kF32, {4}).value();
  Tensor* u = Scale(other, t, 2.0f).value();
  auto cpu_buffer = AllocTensors(tp.cpus[0]->buffer_type(), {t, u}).value();
  Graph g2;
  ASSERT_TRUE(g2.Expand(u).ok());
  auto stream2 = tp.meta().CreateStream().value();
  EXPECT_EQ(stream2->ComputeAsync(g2).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetaDeviceTest, EventsOrderOtherStreams) {
  Tp tp(2, 1, 1, MlpPolicy);
  Weights weights({&tp.meta()});
  Mlp mlp = Mlp::Make(weights, 2).value();
  ASSERT_TRUE(weights.Upload().ok());
  MlpRun run(mlp, tp.meta());
  ASSERT_TRUE(testing::Write(*run.x, MlpInput(5).data()).ok());
  auto stream = tp.meta().CreateStream().value();
  auto event = tp.meta().CreateEvent().value();
  ASSERT_TRUE(stream->ComputeAsync(run.graph).ok());
  ASSERT_TRUE(stream->RecordEvent(*event).ok());
  // A CPU stream waits for the meta device's event, then reads the output.
  auto cpu = tp.extra(0).CreateStream().value();
  ASSERT_TRUE(cpu->WaitEvent(*event).ok());
  ASSERT_TRUE(cpu->Synchronize().ok());
  EXPECT_TRUE(event->IsDone());
  EXPECT_LT(Nmse(testing::Read(*run.y), NaiveMlp(mlp, MlpInput(5))), 1e-10);
}

TEST(MetaDeviceTest, LlamaPolicySplitsByName) {
  SplitPolicy policy = LlamaSplitPolicy(2, {.head_dim = 16, .gqa_ratio = 2});
  Context ctx;
  auto named = [&](std::string name, std::vector<int64_t> ne) {
    Tensor* t = ctx.NewTensor(Type::kF32, ne).value();
    t->name = std::move(name);
    return policy(*t);
  };
  EXPECT_EQ(named("blk.0.attn_q.weight", {64, 64}).axis, SplitAxis::kAxis1);
  EXPECT_EQ(named("blk.0.attn_k.weight", {64, 32}).lengths,
            (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(named("blk.0.attn_output.weight", {64, 64}).axis,
            SplitAxis::kAxis0);
  EXPECT_EQ(named("blk.0.ffn_up.weight", {64, 96}).axis, SplitAxis::kAxis1);
  EXPECT_EQ(named("blk.0.ffn_down.weight", {96, 64}).axis, SplitAxis::kAxis0);
  EXPECT_EQ(named("blk.0.attn_qkv.weight", {64, 128}).n_segments, 3);
  // The KV cache [n_embd_kv, n_ctx] by heads, as attn_k's output.
  EXPECT_EQ(named("cache_k.0", {32, 128}).axis, SplitAxis::kAxis0);
  EXPECT_EQ(named("cache_v.0", {32, 128}).lengths,
            (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(named("token_embd.weight", {64, 100}).axis, SplitAxis::kMirrored);
  EXPECT_EQ(named("blk.0.attn_norm.weight", {64}).axis, SplitAxis::kMirrored);
  // A split that does not fit falls back to mirrored.
  EXPECT_EQ(named("blk.0.attn_q.weight", {64, 40}).axis, SplitAxis::kMirrored);
}

TEST(MetaDeviceTest, LlamaPolicyMirrorsASingleKvHead) {
  // 4 query heads over 1 KV head, 2 members.
  SplitPolicy policy = LlamaSplitPolicy(2, {.head_dim = 16, .gqa_ratio = 4});
  Context ctx;
  auto named = [&](std::string name, std::vector<int64_t> ne) {
    Tensor* t = ctx.NewTensor(Type::kF32, ne).value();
    t->name = std::move(name);
    return policy(*t);
  };
  EXPECT_EQ(named("blk.0.attn_k.weight", {64, 16}).axis, SplitAxis::kMirrored);
  EXPECT_EQ(named("blk.0.attn_v.weight", {64, 16}).axis, SplitAxis::kMirrored);
  EXPECT_EQ(named("cache_k.0", {16, 128}).axis, SplitAxis::kMirrored);
  // Query heads one by one: two each.
  EXPECT_EQ(named("blk.0.attn_q.weight", {64, 64}).lengths,
            (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(named("blk.0.attn_output.weight", {64, 64}).lengths,
            (std::vector<int64_t>{32, 32}));
  // Two KV heads over 4 members: attention whole on every member.
  SplitPolicy four = LlamaSplitPolicy(4, {.head_dim = 16, .gqa_ratio = 2});
  Tensor* q = ctx.NewTensor(Type::kF32, {64, 64}).value();
  q->name = "blk.0.attn_q.weight";
  EXPECT_EQ(four(*q).axis, SplitAxis::kMirrored);
}

}  // namespace
}  // namespace tessera
