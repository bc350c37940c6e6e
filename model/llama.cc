#include "model/llama.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/op_types.h"
#include "graph/ops.h"

namespace tessera {
namespace {

absl::Status Invalid(auto&&... args) {
  return absl::InvalidArgumentError(absl::StrCat("[Llama] ", args...));
}

// The value of integer key `key` of any GGUF integer type; `fallback` when
// absent and given.
absl::StatusOr<int64_t> GetInt(const GgufFile& file, const std::string& key,
                               std::optional<int64_t> fallback = {}) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) {
    if (fallback.has_value()) return *fallback;
    return Invalid("missing key ", key);
  }
  return std::visit(
      [&](const auto& v) -> absl::StatusOr<int64_t> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
              return Invalid(key, " = ", v, " is too large");
            }
          }
          return static_cast<int64_t>(v);
        } else {
          return Invalid(key, " is not an integer");
        }
      },
      *value);
}

absl::StatusOr<float> GetFloat(const GgufFile& file, const std::string& key,
                               std::optional<float> fallback = {}) {
  const GgufValue* value = file.Find(key);
  if (value == nullptr) {
    if (fallback.has_value()) return *fallback;
    return Invalid("missing key ", key);
  }
  if (const float* f = std::get_if<float>(value)) return *f;
  if (const double* d = std::get_if<double>(value)) {
    return static_cast<float>(*d);
  }
  return Invalid(key, " is not a float");
}

// Creates the tensor for file tensor `name` with shape `ne` (checked).
class WeightLoader {
 public:
  WeightLoader(const GgufFile& file, Context& ctx, LlamaWeights& out)
      : file_(file), ctx_(ctx), out_(out) {}

  absl::StatusOr<Tensor*> Load(const std::string& name,
                               std::vector<int64_t> ne, bool optional = false,
                               bool f32_only = false) {
    const GgufTensor* info = file_.FindTensor(name);
    if (info == nullptr) {
      if (optional) return nullptr;
      return Invalid("missing tensor ", name);
    }
    ne.resize(4, 1);
    for (int i = 0; i < 4; ++i) {
      if (info->ne[i] != ne[i]) {
        return Invalid(name, " has shape [", info->ne[0], ", ", info->ne[1],
                       ", ", info->ne[2], ", ", info->ne[3], "], expected [",
                       ne[0], ", ", ne[1], ", ", ne[2], ", ", ne[3], "]");
      }
    }
    absl::StatusOr<Type> type = info->TesseraType();
    if (!type.ok()) return Invalid(std::string(type.status().message()));
    if (f32_only && *type != Type::kF32) {
      return Invalid(name, " must be f32, got ", std::string(TypeName(*type)));
    }
    TESSERA_ASSIGN_OR_RETURN(Tensor * t, ctx_.NewTensor(*type, ne));
    t->name = name;
    t->flags |= kFlagParam;
    out_.all.push_back(t);
    out_.data.push_back(info->data);
    return t;
  }

 private:
  const GgufFile& file_;
  Context& ctx_;
  LlamaWeights& out_;
};

}  // namespace

absl::StatusOr<LlamaConfig> LlamaConfig::FromGguf(const GgufFile& file) {
  absl::StatusOr<absl::string_view> arch =
      file.GetString("general.architecture");
  if (!arch.ok()) return Invalid(std::string(arch.status().message()));
  if (*arch != "llama") {
    return Invalid("architecture is \"", std::string(*arch), "\", not \"llama\"");
  }
  LlamaConfig c;
  TESSERA_ASSIGN_OR_RETURN(c.n_layer, GetInt(file, "llama.block_count"));
  TESSERA_ASSIGN_OR_RETURN(c.n_embd, GetInt(file, "llama.embedding_length"));
  TESSERA_ASSIGN_OR_RETURN(c.n_ff, GetInt(file, "llama.feed_forward_length"));
  TESSERA_ASSIGN_OR_RETURN(c.n_head,
                           GetInt(file, "llama.attention.head_count"));
  TESSERA_ASSIGN_OR_RETURN(
      c.n_head_kv, GetInt(file, "llama.attention.head_count_kv", c.n_head));
  TESSERA_ASSIGN_OR_RETURN(c.n_ctx_train,
                           GetInt(file, "llama.context_length"));
  TESSERA_ASSIGN_OR_RETURN(c.rope_freq_base,
                           GetFloat(file, "llama.rope.freq_base", 10000.0f));
  TESSERA_ASSIGN_OR_RETURN(
      c.rms_eps, GetFloat(file, "llama.attention.layer_norm_rms_epsilon"));
  if (c.n_layer < 1 || c.n_embd < 1 || c.n_ff < 1 || c.n_head < 1 ||
      c.n_head_kv < 1 || c.n_ctx_train < 1) {
    return Invalid("block_count, embedding_length, feed_forward_length, "
                   "head_count, head_count_kv and context_length must be "
                   "positive");
  }
  if (c.n_embd % c.n_head != 0) {
    return Invalid("head_count ", c.n_head, " does not divide ",
                   "embedding_length ", c.n_embd);
  }
  if (c.n_head % c.n_head_kv != 0) {
    return Invalid("head_count_kv ", c.n_head_kv, " does not divide ",
                   "head_count ", c.n_head);
  }
  TESSERA_ASSIGN_OR_RETURN(
      c.n_rot, GetInt(file, "llama.rope.dimension_count", c.head_dim()));
  if (c.n_rot < 2 || c.n_rot % 2 != 0 || c.n_rot > c.head_dim()) {
    return Invalid("rope.dimension_count ", c.n_rot,
                   " must be even and in [2, ", c.head_dim(), "]");
  }
  if (!(c.rms_eps >= 0.0f) || !(c.rope_freq_base > 0.0f)) {
    return Invalid("rms epsilon must be >= 0 and rope.freq_base > 0");
  }
  const GgufTensor* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) return Invalid("missing tensor token_embd.weight");
  c.n_vocab = embd->ne[1];
  return c;
}

absl::StatusOr<LlamaWeights> LlamaWeights::FromGguf(const GgufFile& file,
                                                    const LlamaConfig& c,
                                                    Context& ctx) {
  LlamaWeights w;
  WeightLoader load(file, ctx, w);
  const int64_t e = c.n_embd;
  TESSERA_ASSIGN_OR_RETURN(w.token_embd,
                           load.Load("token_embd.weight", {e, c.n_vocab}));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    LlamaLayer layer;
    TESSERA_ASSIGN_OR_RETURN(
        layer.attn_norm, load.Load(p + "attn_norm.weight", {e}, false, true));
    TESSERA_ASSIGN_OR_RETURN(layer.wq, load.Load(p + "attn_q.weight", {e, e}));
    TESSERA_ASSIGN_OR_RETURN(layer.wk,
                             load.Load(p + "attn_k.weight", {e, c.n_embd_kv()}));
    TESSERA_ASSIGN_OR_RETURN(layer.wv,
                             load.Load(p + "attn_v.weight", {e, c.n_embd_kv()}));
    TESSERA_ASSIGN_OR_RETURN(layer.wo,
                             load.Load(p + "attn_output.weight", {e, e}));
    TESSERA_ASSIGN_OR_RETURN(
        layer.ffn_norm, load.Load(p + "ffn_norm.weight", {e}, false, true));
    TESSERA_ASSIGN_OR_RETURN(layer.ffn_gate,
                             load.Load(p + "ffn_gate.weight", {e, c.n_ff}));
    TESSERA_ASSIGN_OR_RETURN(layer.ffn_up,
                             load.Load(p + "ffn_up.weight", {e, c.n_ff}));
    TESSERA_ASSIGN_OR_RETURN(layer.ffn_down,
                             load.Load(p + "ffn_down.weight", {c.n_ff, e}));
    w.layers.push_back(layer);
  }
  TESSERA_ASSIGN_OR_RETURN(
      w.output_norm, load.Load("output_norm.weight", {e}, false, true));
  TESSERA_ASSIGN_OR_RETURN(
      w.output, load.Load("output.weight", {e, c.n_vocab}, /*optional=*/true));
  if (w.output == nullptr) w.output = w.token_embd;
  TESSERA_ASSIGN_OR_RETURN(
      w.rope_freqs, load.Load("rope_freqs.weight", {c.n_rot / 2}, true, true));
  return w;
}

absl::StatusOr<LlamaCache> LlamaCache::Make(const LlamaConfig& config,
                                            int64_t n_ctx, Type type,
                                            Context& ctx) {
  if (n_ctx < 1) return Invalid("cache size ", n_ctx, " must be >= 1");
  if (!IsAttnKvType(type)) {
    return Invalid("cache type must be ", kAttnKvTypeNames, ", got ",
                   std::string(TypeName(type)));
  }
  if (config.head_dim() % Traits(type).block_size != 0) {
    return Invalid("a ", std::string(TypeName(type)),
                   " cache needs a head size that is a multiple of ",
                   Traits(type).block_size, ", got ", config.head_dim());
  }
  LlamaCache cache;
  cache.n_ctx = n_ctx;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    TESSERA_ASSIGN_OR_RETURN(Tensor * k,
                             ctx.NewTensor(type, {config.n_embd_kv(), n_ctx}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * v,
                             ctx.NewTensor(type, {config.n_embd_kv(), n_ctx}));
    k->name = absl::StrCat("cache_k.", l);
    v->name = absl::StrCat("cache_v.", l);
    cache.k.push_back(k);
    cache.v.push_back(v);
  }
  return cache;
}

absl::StatusOr<std::unique_ptr<LlamaForward>> BuildLlamaForward(
    Context& ctx, const LlamaConfig& c, const LlamaWeights& w,
    const LlamaCache& cache, int64_t n) {
  auto fwd = std::make_unique<LlamaForward>();
  fwd->n_tokens = n;
  auto input = [&](Type type, std::vector<int64_t> ne,
                   const char* name) -> absl::StatusOr<Tensor*> {
    TESSERA_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(type, ne));
    t->name = name;
    t->flags |= kFlagInput;
    return t;
  };
  TESSERA_ASSIGN_OR_RETURN(fwd->tokens, input(Type::kI32, {n}, "tokens"));
  TESSERA_ASSIGN_OR_RETURN(fwd->positions,
                           input(Type::kI32, {n}, "positions"));
  TESSERA_ASSIGN_OR_RETURN(fwd->cache_rows,
                           input(Type::kI32, {n}, "cache_rows"));
  TESSERA_ASSIGN_OR_RETURN(fwd->mask,
                           input(Type::kF16, {cache.n_ctx, n}, "mask"));

  const int64_t hd = c.head_dim();
  const int64_t kv_row = c.n_embd_kv();
  RopeParams rope;
  rope.n_dims = static_cast<int32_t>(c.n_rot);
  rope.mode = kRopeNormal;
  rope.n_ctx_orig = static_cast<int32_t>(c.n_ctx_train);
  rope.freq_base = c.rope_freq_base;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  TESSERA_ASSIGN_OR_RETURN(Tensor * x, GetRows(ctx, w.token_embd, fwd->tokens));
  x->name = "embd";
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LlamaLayer& L = w.layers[l];
    const std::string s = absl::StrCat(".", l);
    TESSERA_ASSIGN_OR_RETURN(Tensor * h, RmsNorm(ctx, x, c.rms_eps));
    h->name = "attn_rms" + s;
    fwd->layer_inputs.push_back(h);
    TESSERA_ASSIGN_OR_RETURN(h, Mul(ctx, h, L.attn_norm));
    TESSERA_ASSIGN_OR_RETURN(Tensor * q, MulMat(ctx, L.wq, h));
    TESSERA_ASSIGN_OR_RETURN(q, Reshape(ctx, q, {hd, c.n_head, n}));
    TESSERA_ASSIGN_OR_RETURN(q, Rope(ctx, q, fwd->positions, rope,
                                     w.rope_freqs));
    q->name = "q" + s;
    TESSERA_ASSIGN_OR_RETURN(Tensor * k, MulMat(ctx, L.wk, h));
    TESSERA_ASSIGN_OR_RETURN(k, Reshape(ctx, k, {hd, c.n_head_kv, n}));
    TESSERA_ASSIGN_OR_RETURN(k, Rope(ctx, k, fwd->positions, rope,
                                     w.rope_freqs));
    TESSERA_ASSIGN_OR_RETURN(k, Reshape(ctx, k, {kv_row, n}));
    k->name = "k" + s;
    TESSERA_ASSIGN_OR_RETURN(Tensor * v, MulMat(ctx, L.wv, h));
    v->name = "v" + s;
    // Write this batch's K and V, then read the whole cache through the
    // writes' results: [hd, n_ctx, n_head_kv] views.
    TESSERA_ASSIGN_OR_RETURN(Tensor * kc,
                             SetRows(ctx, cache.k[l], k, fwd->cache_rows));
    TESSERA_ASSIGN_OR_RETURN(Tensor * vc,
                             SetRows(ctx, cache.v[l], v, fwd->cache_rows));
    const size_t head_bytes = RowSize(kc->type, hd);
    const size_t row_bytes = RowSize(kc->type, kv_row);
    TESSERA_ASSIGN_OR_RETURN(
        Tensor * kv, View(ctx, kc, {hd, c.n_head_kv, cache.n_ctx},
                          {head_bytes, row_bytes}, 0));
    TESSERA_ASSIGN_OR_RETURN(kv, Permute(ctx, kv, 0, 2, 1, 3));
    TESSERA_ASSIGN_OR_RETURN(
        Tensor * vv, View(ctx, vc, {hd, c.n_head_kv, cache.n_ctx},
                          {head_bytes, row_bytes}, 0));
    TESSERA_ASSIGN_OR_RETURN(vv, Permute(ctx, vv, 0, 2, 1, 3));
    TESSERA_ASSIGN_OR_RETURN(Tensor * qp, Permute(ctx, q, 0, 2, 1, 3));
    TESSERA_ASSIGN_OR_RETURN(
        Tensor * attn, FlashAttnExt(ctx, qp, kv, vv, fwd->mask, scale, 0, 0));
    attn->name = "attn" + s;
    TESSERA_ASSIGN_OR_RETURN(attn, Reshape(ctx, attn, {c.n_embd, n}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * o, MulMat(ctx, L.wo, attn));
    TESSERA_ASSIGN_OR_RETURN(x, Add(ctx, x, o));
    x->name = "attn_out" + s;

    TESSERA_ASSIGN_OR_RETURN(h, RmsNorm(ctx, x, c.rms_eps));
    TESSERA_ASSIGN_OR_RETURN(h, Mul(ctx, h, L.ffn_norm));
    TESSERA_ASSIGN_OR_RETURN(Tensor * g, MulMat(ctx, L.ffn_gate, h));
    TESSERA_ASSIGN_OR_RETURN(Tensor * u, MulMat(ctx, L.ffn_up, h));
    TESSERA_ASSIGN_OR_RETURN(Tensor * a, Glu(ctx, g, u, GluOp::kSwiGlu));
    TESSERA_ASSIGN_OR_RETURN(Tensor * d, MulMat(ctx, L.ffn_down, a));
    TESSERA_ASSIGN_OR_RETURN(x, Add(ctx, x, d));
    x->name = "layer_out" + s;
  }
  TESSERA_ASSIGN_OR_RETURN(x, RmsNorm(ctx, x, c.rms_eps));
  TESSERA_ASSIGN_OR_RETURN(x, Mul(ctx, x, w.output_norm));
  TESSERA_ASSIGN_OR_RETURN(fwd->logits, MulMat(ctx, w.output, x));
  fwd->logits->name = "logits";
  fwd->logits->flags |= kFlagOutput;
  TESSERA_RETURN_IF_ERROR(fwd->graph.Expand(fwd->logits));
  return fwd;
}

void FillLlamaMask(absl::Span<const int32_t> positions, int64_t n_ctx,
                   absl::Span<uint16_t> mask) {
  const uint16_t zero = Fp32ToFp16(0.0f);
  const uint16_t minus_inf = Fp32ToFp16(-INFINITY);
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int64_t j = 0; j < n_ctx; ++j) {
      mask[t * n_ctx + j] = j <= positions[t] ? zero : minus_inf;
    }
  }
}

}  // namespace tessera
