#include "tests/integration/llama_stack.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/assembly/device_spec.h"
#include "backend/registry.h"
#include "graph/ops.h"
#include "gtest/gtest.h"
#include "sched/testing/models.h"

namespace tessera::testing {

LlamaStack::LlamaStack(Device& device) {
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    layers.push_back({
        .attn_norm = Weight(p + "attn_norm.weight", {kDim}),
        .wq = Weight(p + "attn_q.weight", {kDim, kDim}),
        .wk = Weight(p + "attn_k.weight", {kDim, kKvDim}),
        .wv = Weight(p + "attn_v.weight", {kDim, kKvDim}),
        .wo = Weight(p + "attn_output.weight", {kDim, kDim}),
        .ffn_norm = Weight(p + "ffn_norm.weight", {kDim}),
        .gate = Weight(p + "ffn_gate.weight", {kDim, kFf}),
        .up = Weight(p + "ffn_up.weight", {kDim, kFf}),
        .down = Weight(p + "ffn_down.weight", {kFf, kDim}),
    });
  }
  output_norm = Weight("output_norm.weight", {kDim});
  buffer = AllocTensors(device.buffer_type(), weights, BufferUsage::kWeights)
               .value();
  for (size_t i = 0; i < weights.size(); ++i) {
    Tensor* w = weights[i];
    const bool norm = w->ne[1] == 1;
    std::vector<float> v(w->NumElements());
    for (size_t j = 0; j < v.size(); ++j) {
      v[j] = norm ? 1.0f + Value(j, i, 0.1f)
                  : Value(j, i, 1.0f) /
                        std::sqrt(static_cast<float>(w->ne[0]));
    }
    absl::Status s = Write(*w, v.data());
    EXPECT_TRUE(s.ok()) << w->name << ": " << s;
  }
  BuildGraph();
}


Tensor* LlamaStack::Weight(std::string name, std::vector<int64_t> ne) {
  Tensor* t = wctx.NewTensor(Type::kF32, ne).value();
  t->name = std::move(name);
  t->flags |= kFlagParam;
  weights.push_back(t);
  return t;
}


void LlamaStack::BuildGraph() {
  x = NewInput(ctx, Type::kF32, {kDim, kTokens}, "x").value();
  pos = NewInput(ctx, Type::kI32, {kTokens}, "pos").value();
  mask =
      NewInput(ctx, Type::kF16, {kTokens, kTokens}, "mask").value();
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  RopeParams rope;
  rope.n_dims = kHeadDim;
  Tensor* h = x;
  for (const Layer& l : layers) {
    Tensor* n = Mul(ctx, RmsNorm(ctx, h, 1e-5f).value(), l.attn_norm).value();
    Tensor* q = MulMat(ctx, l.wq, n).value();
    q = Rope(ctx, Reshape(ctx, q, {kHeadDim, kHeads, kTokens}).value(), pos,
             rope)
            .value();
    Tensor* k = MulMat(ctx, l.wk, n).value();
    k = Rope(ctx, Reshape(ctx, k, {kHeadDim, kKvHeads, kTokens}).value(), pos,
             rope)
            .value();
    Tensor* v = MulMat(ctx, l.wv, n).value();
    v = Reshape(ctx, v, {kHeadDim, kKvHeads, kTokens}).value();
    Tensor* attn = FlashAttnExt(ctx, Permute(ctx, q, 0, 2, 1, 3).value(),
                                Permute(ctx, k, 0, 2, 1, 3).value(),
                                Permute(ctx, v, 0, 2, 1, 3).value(), mask,
                                scale, 0.0f, 0.0f)
                       .value();
    attn = Reshape(ctx, attn, {kDim, kTokens}).value();
    h = Add(ctx, h, MulMat(ctx, l.wo, attn).value()).value();
    n = Mul(ctx, RmsNorm(ctx, h, 1e-5f).value(), l.ffn_norm).value();
    Tensor* a = Glu(ctx, MulMat(ctx, l.gate, n).value(),
                    MulMat(ctx, l.up, n).value(), GluOp::kSwiGlu)
                    .value();
    h = Add(ctx, h, MulMat(ctx, l.down, a).value()).value();
  }
  y = Mul(ctx, RmsNorm(ctx, h, 1e-5f).value(), output_norm).value();
  y->name = "y";
  y->flags |= kFlagOutput;
  EXPECT_TRUE(graph.Expand(y).ok());
}


LlamaStack::Inputs LlamaStack::MakeInputs(int k) {
  Inputs in;
  in.x.resize(kDim * kTokens);
  for (size_t i = 0; i < in.x.size(); ++i) {
    in.x[i] = Value(i, 50 + k, 1.0f);
  }
  for (int64_t t = 0; t < kTokens; ++t) {
    in.pos.push_back(static_cast<int32_t>(3 * k + t));
    for (int64_t j = 0; j < kTokens; ++j) {
      in.mask.push_back(Fp32ToFp16(j <= t ? 0.0f : -INFINITY));
    }
  }
  return in;
}


std::vector<client::TensorInput> LlamaStack::Bind(const Inputs& in) const {
  return {{x, in.x.data(), in.x.size() * sizeof(float)},
          {pos, in.pos.data(), in.pos.size() * sizeof(int32_t)},
          {mask, in.mask.data(), in.mask.size() * sizeof(uint16_t)}};
}

std::vector<float> LlamaStack::RunOn(Device& device, int k) {
  if (compute == nullptr) {
    std::vector<Tensor*> io = {x, pos, mask};
    for (Tensor* t : graph.nodes()) io.push_back(t);
    compute = AllocTensors(device.buffer_type(), io).value();
    compute->set_usage(BufferUsage::kCompute);
  }
  const Inputs in = MakeInputs(k);
  EXPECT_TRUE(Write(*x, in.x.data()).ok());
  EXPECT_TRUE(Write(*pos, in.pos.data()).ok());
  EXPECT_TRUE(Write(*mask, in.mask.data()).ok());
  auto stream = device.CreateStream().value();
  absl::Status s = stream->Compute(graph);
  EXPECT_TRUE(s.ok()) << s;
  return Read(*y);
}

std::vector<float> Local(int k) {
  Registry registry;
  EXPECT_TRUE(AddDevices("cpu", 1, registry).ok());
  Device& cpu = *registry.devices()[0];
  return LlamaStack(cpu).RunOn(cpu, k);
}

}  // namespace tessera::testing
