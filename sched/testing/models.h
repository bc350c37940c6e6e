#ifndef TESSERA_SCHED_TESTING_MODELS_H_
#define TESSERA_SCHED_TESTING_MODELS_H_

// Small models built from the graph IR for multi-device tests: an MLP and a
// transformer block whose weights are spread round-robin over devices, with
// deterministic weights and inputs and a naive double-precision MLP.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/device.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "base/status_macros.h"
#include "graph/tensor.h"
#include "sched/scheduler.h"
#include "backend/alloc/tensor_allocator.h"
#include "gtest/gtest.h"

namespace tessera::testing {

// Deterministic test values in about [-scale, scale].
inline float Value(int64_t i, int seed, float scale) {
  return scale * std::sin(0.37f * static_cast<float>(i) + 1.31f * seed);
}

// Normalized mean squared error of `got` against `want`.
inline double Nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return norm == 0 ? err : err / norm;
}

// Weights spread round-robin over devices, in WEIGHTS-usage buffers.
class Weights {
 public:
  explicit Weights(std::vector<Device*> devices)
      : devices_(std::move(devices)), per_device_(devices_.size()) {}

  // A new F32 weight of shape `ne` on the next device.
  absl::StatusOr<Tensor*> Add(std::vector<int64_t> ne, std::string name) {
    TESSERA_ASSIGN_OR_RETURN(Tensor * w, ctx_.NewTensor(Type::kF32, ne));
    w->name = std::move(name);
    w->flags |= kFlagParam;
    per_device_[all_.size() % devices_.size()].push_back(w);
    all_.push_back(w);
    return w;
  }

  // Allocates every weight and fills it with values seeded by its index.
  absl::Status Upload() {
    for (size_t d = 0; d < devices_.size(); ++d) {
      if (per_device_[d].empty()) continue;
      TESSERA_ASSIGN_OR_RETURN(
          std::unique_ptr<Buffer> buffer,
          AllocTensors(devices_[d]->buffer_type(), per_device_[d]));
      buffer->set_usage(BufferUsage::kWeights);
      buffers_.push_back(std::move(buffer));
    }
    for (size_t i = 0; i < all_.size(); ++i) {
      Tensor* w = all_[i];
      std::vector<float> values(w->NumElements());
      for (size_t j = 0; j < values.size(); ++j) {
        values[j] = Value(j, static_cast<int>(i) + 1, 0.25f);
      }
      TESSERA_RETURN_IF_ERROR(
          w->buffer->SetTensor(*w, values.data(), 0, w->NumBytes()));
    }
    return absl::OkStatus();
  }

  const std::vector<Tensor*>& all() const { return all_; }

 private:
  std::vector<Device*> devices_;
  Context ctx_;
  std::vector<std::vector<Tensor*>> per_device_;
  std::vector<Tensor*> all_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

// An MLP: layer i computes W_i x + b_i, with ReLU between layers.
struct Mlp {
  static constexpr int64_t kDim = 64;
  static constexpr int64_t kBatch = 8;
  std::vector<Tensor*> w;
  std::vector<Tensor*> b;

  static absl::StatusOr<Mlp> Make(Weights& weights, int layers) {
    Mlp mlp;
    for (int i = 0; i < layers; ++i) {
      TESSERA_ASSIGN_OR_RETURN(
          Tensor * w, weights.Add({kDim, kDim}, "w" + std::to_string(i)));
      TESSERA_ASSIGN_OR_RETURN(Tensor * b,
                               weights.Add({kDim}, "b" + std::to_string(i)));
      mlp.w.push_back(w);
      mlp.b.push_back(b);
    }
    return mlp;
  }

  absl::StatusOr<Tensor*> Forward(Context& ctx, Tensor* x) const {
    Tensor* h = x;
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string n = std::to_string(i);
      TESSERA_ASSIGN_OR_RETURN(h, MulMat(ctx, w[i], h));
      h->name = "mm" + n;
      TESSERA_ASSIGN_OR_RETURN(h, tessera::Add(ctx, h, b[i]));
      h->name = "add" + n;
      if (i + 1 < w.size()) {
        TESSERA_ASSIGN_OR_RETURN(h, Unary(ctx, h, UnaryOp::kRelu));
        h->name = "relu" + n;
      }
    }
    return h;
  }
};

// A transformer block: RMS_NORM, q/k/v/o projections, ROPE, attention with
// SOFT_MAX and a causal mask (or FLASH_ATTN_EXT), a SwiGLU FFN and residual
// ADDs.
struct Block {
  static constexpr int64_t kDim = 64;
  static constexpr int64_t kHeads = 4;
  static constexpr int64_t kHeadDim = kDim / kHeads;
  static constexpr int64_t kFf = 96;
  static constexpr int64_t kTokens = 8;
  Tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *wg, *wu, *wd;

  static absl::StatusOr<Block> Make(Weights& weights) {
    Block b;
    TESSERA_ASSIGN_OR_RETURN(b.attn_norm, weights.Add({kDim}, "attn_norm"));
    TESSERA_ASSIGN_OR_RETURN(b.wq, weights.Add({kDim, kDim}, "wq"));
    TESSERA_ASSIGN_OR_RETURN(b.wk, weights.Add({kDim, kDim}, "wk"));
    TESSERA_ASSIGN_OR_RETURN(b.wv, weights.Add({kDim, kDim}, "wv"));
    TESSERA_ASSIGN_OR_RETURN(b.wo, weights.Add({kDim, kDim}, "wo"));
    TESSERA_ASSIGN_OR_RETURN(b.ffn_norm, weights.Add({kDim}, "ffn_norm"));
    TESSERA_ASSIGN_OR_RETURN(b.wg, weights.Add({kDim, kFf}, "wg"));
    TESSERA_ASSIGN_OR_RETURN(b.wu, weights.Add({kDim, kFf}, "wu"));
    TESSERA_ASSIGN_OR_RETURN(b.wd, weights.Add({kFf, kDim}, "wd"));
    return b;
  }

  absl::StatusOr<Tensor*> Forward(Context& ctx, Tensor* x, Tensor* pos,
                                  Tensor* mask, bool flash) const {
    const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    RopeParams rope;
    rope.n_dims = kHeadDim;
    TESSERA_ASSIGN_OR_RETURN(Tensor * h, RmsNorm(ctx, x, 1e-5f));
    TESSERA_ASSIGN_OR_RETURN(h, Mul(ctx, h, attn_norm));
    TESSERA_ASSIGN_OR_RETURN(Tensor * q, MulMat(ctx, wq, h));
    TESSERA_ASSIGN_OR_RETURN(q, Reshape(ctx, q, {kHeadDim, kHeads, kTokens}));
    TESSERA_ASSIGN_OR_RETURN(q, Rope(ctx, q, pos, rope));
    TESSERA_ASSIGN_OR_RETURN(Tensor * k, MulMat(ctx, wk, h));
    TESSERA_ASSIGN_OR_RETURN(k, Reshape(ctx, k, {kHeadDim, kHeads, kTokens}));
    TESSERA_ASSIGN_OR_RETURN(k, Rope(ctx, k, pos, rope));
    TESSERA_ASSIGN_OR_RETURN(Tensor * v, MulMat(ctx, wv, h));
    TESSERA_ASSIGN_OR_RETURN(v, Reshape(ctx, v, {kHeadDim, kHeads, kTokens}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * qp, Permute(ctx, q, 0, 2, 1, 3));
    TESSERA_ASSIGN_OR_RETURN(Tensor * kp, Permute(ctx, k, 0, 2, 1, 3));
    Tensor* attn = nullptr;
    if (flash) {
      TESSERA_ASSIGN_OR_RETURN(Tensor * vp, Permute(ctx, v, 0, 2, 1, 3));
      TESSERA_ASSIGN_OR_RETURN(
          attn, FlashAttnExt(ctx, qp, kp, vp, mask, scale, 0.0f, 0.0f));
    } else {
      TESSERA_ASSIGN_OR_RETURN(Tensor * kq, MulMat(ctx, kp, qp));
      TESSERA_ASSIGN_OR_RETURN(kq, SoftMax(ctx, kq, mask, scale, 0.0f));
      TESSERA_ASSIGN_OR_RETURN(Tensor * vt, Permute(ctx, v, 1, 2, 0, 3));
      TESSERA_ASSIGN_OR_RETURN(vt, Cont(ctx, vt));
      TESSERA_ASSIGN_OR_RETURN(Tensor * kqv, MulMat(ctx, vt, kq));
      TESSERA_ASSIGN_OR_RETURN(attn, Permute(ctx, kqv, 0, 2, 1, 3));
      TESSERA_ASSIGN_OR_RETURN(attn, Cont(ctx, attn));
    }
    TESSERA_ASSIGN_OR_RETURN(attn, Reshape(ctx, attn, {kDim, kTokens}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * o, MulMat(ctx, wo, attn));
    TESSERA_ASSIGN_OR_RETURN(Tensor * x1, tessera::Add(ctx, x, o));
    TESSERA_ASSIGN_OR_RETURN(h, RmsNorm(ctx, x1, 1e-5f));
    TESSERA_ASSIGN_OR_RETURN(h, Mul(ctx, h, ffn_norm));
    TESSERA_ASSIGN_OR_RETURN(Tensor * g, MulMat(ctx, wg, h));
    TESSERA_ASSIGN_OR_RETURN(Tensor * u, MulMat(ctx, wu, h));
    TESSERA_ASSIGN_OR_RETURN(Tensor * a, Glu(ctx, g, u, GluOp::kSwiGlu));
    TESSERA_ASSIGN_OR_RETURN(Tensor * down, MulMat(ctx, wd, a));
    return tessera::Add(ctx, x1, down);
  }
};

inline absl::StatusOr<Tensor*> NewInput(Context& ctx, Type type,
                                 std::vector<int64_t> ne, std::string name) {
  TESSERA_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(type, ne));
  t->name = std::move(name);
  t->flags |= kFlagInput;
  return t;
}

inline absl::Status Write(Tensor& t, const void* data) {
  return t.buffer->SetTensor(t, data, 0, t.NumBytes());
}

inline std::vector<float> Read(const Tensor& t) {
  std::vector<float> out(t.NumElements());
  absl::Status s = t.buffer->GetTensor(t, out.data(), 0, t.NumBytes());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

inline std::vector<float> MlpInput(int seed) {
  std::vector<float> x(Mlp::kDim * Mlp::kBatch);
  for (size_t i = 0; i < x.size(); ++i) x[i] = Value(i, 100 + seed, 1.0f);
  return x;
}

// The MLP computed naively in double precision.
inline std::vector<float> NaiveMlp(const Mlp& mlp, const std::vector<float>& x) {
  std::vector<double> h(x.begin(), x.end());
  for (size_t l = 0; l < mlp.w.size(); ++l) {
    std::vector<float> w = Read(*mlp.w[l]);
    std::vector<float> b = Read(*mlp.b[l]);
    std::vector<double> next(Mlp::kDim * Mlp::kBatch);
    for (int64_t n = 0; n < Mlp::kBatch; ++n) {
      for (int64_t m = 0; m < Mlp::kDim; ++m) {
        double sum = 0;
        for (int64_t k = 0; k < Mlp::kDim; ++k) {
          sum += double{w[m * Mlp::kDim + k]} * h[n * Mlp::kDim + k];
        }
        sum += b[m];
        if (l + 1 < mlp.w.size()) sum = std::max(sum, 0.0);
        next[n * Mlp::kDim + m] = sum;
      }
    }
    h = std::move(next);
  }
  return std::vector<float>(h.begin(), h.end());
}

// Inputs of the transformer block: activations, positions and a causal
// mask.
struct BlockInputs {
  std::vector<float> x;
  std::vector<int32_t> pos;
  std::vector<float> mask;

  static BlockInputs Make() {
    BlockInputs in;
    in.x.resize(Block::kDim * Block::kTokens);
    for (size_t i = 0; i < in.x.size(); ++i) in.x[i] = Value(i, 7, 1.0f);
    in.pos.resize(Block::kTokens);
    for (int i = 0; i < Block::kTokens; ++i) in.pos[i] = 3 + i;
    in.mask.resize(Block::kTokens * Block::kTokens);
    for (int q = 0; q < Block::kTokens; ++q) {
      for (int k = 0; k < Block::kTokens; ++k) {
        in.mask[q * Block::kTokens + k] = k <= q ? 0.0f : -INFINITY;
      }
    }
    return in;
  }
};

// The MLP's graph on a new F32 input x [kDim, kBatch] in `ctx`, its output
// flagged, expanded into `graph`: {input, output}.
inline absl::StatusOr<std::pair<Tensor*, Tensor*>> MlpGraph(Context& ctx,
                                                            const Mlp& mlp,
                                                            Graph& graph) {
  TESSERA_ASSIGN_OR_RETURN(
      Tensor * in, NewInput(ctx, Type::kF32, {Mlp::kDim, Mlp::kBatch}, "x"));
  TESSERA_ASSIGN_OR_RETURN(Tensor * out, mlp.Forward(ctx, in));
  out->flags |= kFlagOutput;
  TESSERA_RETURN_IF_ERROR(graph.Expand(out));
  return std::make_pair(in, out);
}

// The MLP's micro-batches MlpInput(0 .. n - 1) through `sched`, pipelined:
// each written into `in` as soon as the previous ComputeAsync returns, each
// output read asynchronously, then one Synchronize.
inline absl::StatusOr<std::vector<std::vector<float>>> ComputePipelined(
    Scheduler& sched, Graph& graph, Tensor& in, const Tensor& out, int n) {
  std::vector<std::vector<float>> got(n,
                                      std::vector<float>(out.NumElements()));
  for (int k = 0; k < n; ++k) {
    TESSERA_RETURN_IF_ERROR(Write(in, MlpInput(k).data()));
    TESSERA_RETURN_IF_ERROR(sched.ComputeAsync(graph));
    TESSERA_RETURN_IF_ERROR(
        sched.GetTensorAsync(out, got[k].data(), 0, out.NumBytes()));
  }
  TESSERA_RETURN_IF_ERROR(sched.Synchronize());
  return got;
}

// The transformer block's graph: its inputs x, pos and mask, new in `ctx`,
// and its output (flagged), expanded into `graph`.
struct BlockGraph {
  Tensor* x;
  Tensor* pos;
  Tensor* mask;
  Tensor* out;

  static absl::StatusOr<BlockGraph> Make(Context& ctx, const Block& block,
                                         bool flash, Graph& graph) {
    BlockGraph g;
    TESSERA_ASSIGN_OR_RETURN(
        g.x, NewInput(ctx, Type::kF32, {Block::kDim, Block::kTokens}, "x"));
    TESSERA_ASSIGN_OR_RETURN(g.pos,
                             NewInput(ctx, Type::kI32, {Block::kTokens}, "pos"));
    TESSERA_ASSIGN_OR_RETURN(
        g.mask, NewInput(ctx, Type::kF32, {Block::kTokens, Block::kTokens},
                         "mask"));
    TESSERA_ASSIGN_OR_RETURN(g.out,
                             block.Forward(ctx, g.x, g.pos, g.mask, flash));
    g.out->flags |= kFlagOutput;
    TESSERA_RETURN_IF_ERROR(graph.Expand(g.out));
    return g;
  }

  // Writes `in` into the allocated inputs.
  absl::Status WriteInputs(const BlockInputs& in) const {
    TESSERA_RETURN_IF_ERROR(Write(*x, in.x.data()));
    TESSERA_RETURN_IF_ERROR(Write(*pos, in.pos.data()));
    return Write(*mask, in.mask.data());
  }
};

}  // namespace tessera::testing

#endif  // TESSERA_SCHED_TESTING_MODELS_H_
