#include "tests/ggml_rpc/llama_graph.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops.h"

namespace tessera::testing {
namespace {

constexpr int64_t kEmbd = 32, kHeads = 4, kHeadDim = 8, kTokens = 4,
                  kFf = 64, kVocab = 16, kLayers = 2;

// ggml's numbers (include/ggml.h), written out independently of the
// daemon's tables.
uint32_t GgmlOp(Op op) {
  switch (op) {
    case Op::kNone: return 0;
    case Op::kDup: return 1;
    case Op::kAdd: return 2;
    case Op::kSub: return 6;
    case Op::kMul: return 7;
    case Op::kDiv: return 8;
    case Op::kSqr: return 9;
    case Op::kSqrt: return 10;
    case Op::kLog: return 11;
    case Op::kSumRows: return 15;
    case Op::kMean: return 17;
    case Op::kArgmax: return 18;
    case Op::kConcat: return 22;
    case Op::kNorm: return 24;
    case Op::kRmsNorm: return 25;
    case Op::kMulMat: return 29;
    case Op::kScale: return 32;
    case Op::kCpy: return 34;
    case Op::kCont: return 35;
    case Op::kReshape: return 36;
    case Op::kView: return 37;
    case Op::kPermute: return 38;
    case Op::kTranspose: return 39;
    case Op::kGetRows: return 40;
    case Op::kSetRows: return 42;
    case Op::kSoftMax: return 46;
    case Op::kRope: return 48;
    case Op::kArgsort: return 69;
    case Op::kFlashAttnExt: return 74;
    case Op::kUnary: return 91;
    case Op::kGlu: return 100;
  }
  return 999;
}

uint32_t GgmlType(Type type) {
  switch (type) {
    case Type::kF32: return 0;
    case Type::kF16: return 1;
    case Type::kI32: return 26;
    case Type::kI64: return 27;
    case Type::kBF16: return 30;
    default: return 999;
  }
}

int32_t GgmlUnary(int32_t op) {
  switch (static_cast<UnaryOp>(op)) {
    case UnaryOp::kNeg: return 2;
    case UnaryOp::kTanh: return 4;
    case UnaryOp::kRelu: return 6;
    case UnaryOp::kSigmoid: return 7;
    case UnaryOp::kGelu: return 8;
    case UnaryOp::kSilu: return 10;
    case UnaryOp::kExp: return 13;
  }
  return 999;
}

uint64_t Align(uint64_t n) { return (n + 63) & ~uint64_t{63}; }

}  // namespace

absl::StatusOr<LlamaGraph> BuildLlama() {
  LlamaGraph g;
  Context& ctx = *g.ctx;
  auto leaf = [&](const std::string& name, Type type,
                  std::vector<int64_t> ne) -> absl::StatusOr<Tensor*> {
    TESSERA_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(type, ne));
    t->name = name;
    return t;
  };
  TESSERA_ASSIGN_OR_RETURN(Tensor * embd,
                           leaf("tok_embd", Type::kF32, {kEmbd, kVocab}));
  TESSERA_ASSIGN_OR_RETURN(g.tokens, leaf("tokens", Type::kI32, {kTokens}));
  TESSERA_ASSIGN_OR_RETURN(Tensor * pos, leaf("pos", Type::kI32, {kTokens}));
  TESSERA_ASSIGN_OR_RETURN(Tensor * mask,
                           leaf("mask", Type::kF32, {kTokens, kTokens}));
  TESSERA_ASSIGN_OR_RETURN(Tensor * kv_rows,
                           leaf("kv_rows", Type::kI64, {kTokens}));
  TESSERA_ASSIGN_OR_RETURN(Tensor * x, GetRows(ctx, embd, g.tokens));
  RopeParams rope;
  rope.n_dims = kHeadDim;
  for (int l = 0; l < kLayers; ++l) {
    auto w = [&](const char* what, std::vector<int64_t> ne) {
      return leaf(absl::StrCat("blk.", l, ".", what), Type::kF32, ne);
    };
    TESSERA_ASSIGN_OR_RETURN(Tensor * attn_norm, w("attn_norm", {kEmbd}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * wq, w("wq", {kEmbd, kEmbd}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * wk, w("wk", {kEmbd, kEmbd}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * wv, w("wv", {kEmbd, kEmbd}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * wo, w("wo", {kEmbd, kEmbd}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * ffn_norm, w("ffn_norm", {kEmbd}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * gate, w("ffn_gate", {kEmbd, kFf}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * up, w("ffn_up", {kEmbd, kFf}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * down, w("ffn_down", {kFf, kEmbd}));

    TESSERA_ASSIGN_OR_RETURN(Tensor * h, RmsNorm(ctx, x, 1e-5f));
    TESSERA_ASSIGN_OR_RETURN(h, Mul(ctx, h, attn_norm));
    TESSERA_ASSIGN_OR_RETURN(Tensor * q, MulMat(ctx, wq, h));
    TESSERA_ASSIGN_OR_RETURN(Tensor * k, MulMat(ctx, wk, h));
    TESSERA_ASSIGN_OR_RETURN(Tensor * v, MulMat(ctx, wv, h));
    TESSERA_ASSIGN_OR_RETURN(q, Reshape(ctx, q, {kHeadDim, kHeads, kTokens}));
    TESSERA_ASSIGN_OR_RETURN(k, Reshape(ctx, k, {kHeadDim, kHeads, kTokens}));
    TESSERA_ASSIGN_OR_RETURN(v, Reshape(ctx, v, {kHeadDim, kHeads, kTokens}));
    TESSERA_ASSIGN_OR_RETURN(q, Rope(ctx, q, pos, rope));
    TESSERA_ASSIGN_OR_RETURN(k, Rope(ctx, k, pos, rope));
    // A KV cache: K and V written into F16 caches by SET_ROWS, then read
    // back through views of what was written (llama.cpp views the cache
    // itself and relies on node order; tessera's graphs say the
    // dependency).
    TESSERA_ASSIGN_OR_RETURN(Tensor * k_cache,
                             leaf(absl::StrCat("blk.", l, ".k_cache"),
                                  Type::kF16, {kEmbd, kTokens}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * v_cache,
                             leaf(absl::StrCat("blk.", l, ".v_cache"),
                                  Type::kF16, {kEmbd, kTokens}));
    auto cached = [&](Tensor* cache, Tensor* t) -> absl::StatusOr<Tensor*> {
      TESSERA_ASSIGN_OR_RETURN(Tensor * rows,
                               Reshape(ctx, t, {kEmbd, kTokens}));
      TESSERA_ASSIGN_OR_RETURN(Tensor * written,
                               SetRows(ctx, cache, rows, kv_rows));
      const size_t f16 = sizeof(uint16_t);
      return View(ctx, written, {kHeadDim, kHeads, kTokens},
                  {f16 * kHeadDim, f16 * kEmbd}, 0);
    };
    TESSERA_ASSIGN_OR_RETURN(k, cached(k_cache, k));
    TESSERA_ASSIGN_OR_RETURN(v, cached(v_cache, v));
    TESSERA_ASSIGN_OR_RETURN(q, Permute(ctx, q, 0, 2, 1, 3));
    TESSERA_ASSIGN_OR_RETURN(k, Permute(ctx, k, 0, 2, 1, 3));
    TESSERA_ASSIGN_OR_RETURN(Tensor * kq, MulMat(ctx, k, q));
    TESSERA_ASSIGN_OR_RETURN(
        kq, SoftMax(ctx, kq, mask, 1.0f / std::sqrt(float{kHeadDim}), 0.0f));
    TESSERA_ASSIGN_OR_RETURN(Tensor * vt, Permute(ctx, v, 1, 2, 0, 3));
    TESSERA_ASSIGN_OR_RETURN(vt, Cont(ctx, vt));
    TESSERA_ASSIGN_OR_RETURN(Tensor * kqv, MulMat(ctx, vt, kq));
    TESSERA_ASSIGN_OR_RETURN(kqv, Permute(ctx, kqv, 0, 2, 1, 3));
    TESSERA_ASSIGN_OR_RETURN(kqv, Cont(ctx, kqv));
    TESSERA_ASSIGN_OR_RETURN(kqv, Reshape(ctx, kqv, {kEmbd, kTokens}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * attn, MulMat(ctx, wo, kqv));
    TESSERA_ASSIGN_OR_RETURN(x, Add(ctx, attn, x));
    TESSERA_ASSIGN_OR_RETURN(h, RmsNorm(ctx, x, 1e-5f));
    TESSERA_ASSIGN_OR_RETURN(h, Mul(ctx, h, ffn_norm));
    TESSERA_ASSIGN_OR_RETURN(Tensor * g_, MulMat(ctx, gate, h));
    TESSERA_ASSIGN_OR_RETURN(Tensor * u, MulMat(ctx, up, h));
    TESSERA_ASSIGN_OR_RETURN(Tensor * act, Glu(ctx, g_, u, GluOp::kSwiGlu));
    TESSERA_ASSIGN_OR_RETURN(Tensor * ffn, MulMat(ctx, down, act));
    TESSERA_ASSIGN_OR_RETURN(x, Add(ctx, ffn, x));
  }
  TESSERA_ASSIGN_OR_RETURN(Tensor * norm, leaf("output_norm", Type::kF32,
                                               {kEmbd}));
  TESSERA_ASSIGN_OR_RETURN(Tensor * head, leaf("output", Type::kF32,
                                               {kEmbd, kVocab}));
  TESSERA_ASSIGN_OR_RETURN(x, RmsNorm(ctx, x, 1e-5f));
  TESSERA_ASSIGN_OR_RETURN(x, Mul(ctx, x, norm));
  TESSERA_ASSIGN_OR_RETURN(g.logits, MulMat(ctx, head, x));
  g.logits->name = "logits";
  g.logits->flags |= kFlagOutput;
  TESSERA_RETURN_IF_ERROR(g.graph->Expand(g.logits));
  return g;
}

std::map<std::string, std::vector<uint8_t>> LlamaLeafData(
    const LlamaGraph& g, const std::vector<int32_t>& tokens) {
  std::map<std::string, std::vector<uint8_t>> out;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  for (const Tensor* t : g.graph->leafs()) {
    std::vector<uint8_t>& bytes = out[t->name];
    bytes.resize(t->NumBytes());
    const int64_t n = t->NumElements();
    if (t->name == "tokens") {
      std::memcpy(bytes.data(), tokens.data(), bytes.size());
    } else if (t->name == "pos") {
      for (int32_t i = 0; i < n; ++i) std::memcpy(&bytes[4 * i], &i, 4);
    } else if (t->name == "kv_rows") {
      for (int64_t i = 0; i < n; ++i) std::memcpy(&bytes[8 * i], &i, 8);
    } else if (t->type == Type::kF16) {
      // A KV cache: every row is written before it is read.
    } else if (t->name == "mask") {
      for (int64_t r = 0; r < kTokens; ++r) {
        for (int64_t c = 0; c < kTokens; ++c) {
          const float v =
              c <= r ? 0.0f : -std::numeric_limits<float>::infinity();
          std::memcpy(&bytes[4 * (r * kTokens + c)], &v, 4);
        }
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const float v = dist(rng);
        std::memcpy(&bytes[4 * i], &v, 4);
      }
    }
  }
  return out;
}

absl::StatusOr<GgmlGraph> ToGgml(const Graph& graph, uint64_t weights_ptr,
                                 uint64_t weights_base, uint64_t compute_ptr,
                                 uint64_t compute_base) {
  GgmlGraph out;
  std::map<const Tensor*, uint64_t> ids;
  auto id_of = [&](const Tensor* t) -> uint64_t {
    if (t == nullptr) return 0;
    auto [it, fresh] = ids.emplace(t, ids.size() + 1);
    return it->second;
  };
  auto emit = [&](const Tensor* t, bool node) -> absl::Status {
    GgmlTensor g;
    g.id = id_of(t);
    g.type = GgmlType(t->type);
    for (int i = 0; i < 4; ++i) {
      g.ne[i] = static_cast<uint32_t>(t->ne[i]);
      g.nb[i] = static_cast<uint32_t>(t->nb[i]);
    }
    g.name = t->name;
    if (t->HasFlag(kFlagOutput)) g.flags |= 2;
    if (node) {
      g.op = GgmlOp(t->op);
      for (int i = 0; i < 16; ++i) g.op_params[i] = t->op_params[i];
      if (t->op == Op::kUnary) g.op_params[0] = GgmlUnary(t->op_params[0]);
      if (t->op == Op::kGlu) {
        g.op_params[0] = t->op_params[0] == 0 ? 2 /*SWIGLU*/ : 1 /*GEGLU*/;
      }
      for (int i = 0; i < 10; ++i) g.src[i] = id_of(t->src[i]);
      // ggml also lists SET_ROWS's destination as src[2].
      if (t->op == Op::kSetRows) g.src[2] = id_of(t->view_src);
      g.view_src = id_of(t->view_src);
      g.view_offs = t->view_offs;
    }
    if (g.view_src != 0) {
      const GgmlTensor& root = out.by_tensor.at(t->view_src);
      g.buffer = root.buffer;
      g.data = root.data + t->view_offs;
    } else if (node) {
      g.buffer = compute_ptr;
      g.data = compute_base + out.compute_bytes;
      out.compute_bytes += Align(t->NumBytes());
    } else {
      g.buffer = weights_ptr;
      g.data = weights_base + out.weights_bytes;
      out.weights_bytes += Align(t->NumBytes());
    }
    out.by_tensor[t] = g;
    out.tensors.push_back(g);
    return absl::OkStatus();
  };
  for (const Tensor* t : graph.leafs()) TESSERA_RETURN_IF_ERROR(emit(t, false));
  for (const Tensor* t : graph.nodes()) {
    TESSERA_RETURN_IF_ERROR(emit(t, true));
    out.nodes.push_back(id_of(t));
  }
  return out;
}

}  // namespace tessera::testing
