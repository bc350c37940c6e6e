#ifndef TESSERA_MODEL_LLAMA_H_
#define TESSERA_MODEL_LLAMA_H_

// The LLaMA architecture as GGUF files describe it (llama.cpp's
// LLM_ARCH_LLAMA): hyperparameters, the weight tensors, the KV cache and the
// forward graph of a batch of tokens of one sequence. Knows no device: the
// weights are tensors without data until a runner places them
// (runner/llama_runner.h).
//
// Usage:
//   auto file = GgufFile::Open(path).value();
//   LlamaConfig config = LlamaConfig::FromGguf(*file).value();
//   Context weights_ctx;
//   LlamaWeights w = LlamaWeights::FromGguf(*file, config, weights_ctx).value();
//   // ... give w's tensors data (w.all, with their bytes in w.data) ...
//   LlamaCache cache = LlamaCache::Make(config, 512, Type::kF16, ctx).value();
//   LlamaForward fwd = BuildLlamaForward(ctx, config, w, cache, 8).value();
//   // inputs: fwd.tokens, fwd.positions, fwd.cache_rows, fwd.mask
//   // (FillLlamaMask); output: fwd.logits [n_vocab, n_tokens].

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "model/gguf_reader.h"

namespace tessera {

// Hyperparameters from the GGUF metadata.
struct LlamaConfig {
  int64_t n_layer = 0;       // llama.block_count
  int64_t n_embd = 0;        // llama.embedding_length
  int64_t n_ff = 0;          // llama.feed_forward_length
  int64_t n_head = 0;        // llama.attention.head_count
  int64_t n_head_kv = 0;     // llama.attention.head_count_kv (else n_head)
  int64_t n_ctx_train = 0;   // llama.context_length
  int64_t n_rot = 0;         // llama.rope.dimension_count (else head_dim)
  int64_t n_vocab = 0;       // token_embd.weight's ne[1]
  float rope_freq_base = 10000.0f;  // llama.rope.freq_base
  float rms_eps = 1e-5f;     // llama.attention.layer_norm_rms_epsilon

  int64_t head_dim() const { return n_embd / n_head; }
  int64_t n_embd_kv() const { return head_dim() * n_head_kv; }

  // Reads and checks the metadata (architecture "llama"; integer keys may be
  // any GGUF integer type). Errors: INVALID_ARGUMENT "[Llama] ..." for
  // another architecture, a missing key, a value of the wrong type or out
  // of range (n_head not dividing n_embd, n_head_kv not dividing n_head, an
  // odd or too large n_rot), or no token_embd.weight.
  static absl::StatusOr<LlamaConfig> FromGguf(const GgufFile& file);
};

struct LlamaLayer {
  Tensor* attn_norm = nullptr;  // [n_embd]
  Tensor* wq = nullptr;         // [n_embd, n_embd]
  Tensor* wk = nullptr;         // [n_embd, n_embd_kv]
  Tensor* wv = nullptr;         // [n_embd, n_embd_kv]
  Tensor* wo = nullptr;         // [n_embd, n_embd]
  Tensor* ffn_norm = nullptr;   // [n_embd]
  Tensor* ffn_gate = nullptr;   // [n_embd, n_ff]
  Tensor* ffn_up = nullptr;     // [n_embd, n_ff]
  Tensor* ffn_down = nullptr;   // [n_ff, n_embd]
};

// The weights as tensors (type and shape from the file, no data), in a
// Context the caller owns.
struct LlamaWeights {
  Tensor* token_embd = nullptr;   // [n_embd, n_vocab]
  Tensor* output_norm = nullptr;  // [n_embd]
  Tensor* output = nullptr;       // [n_embd, n_vocab]; token_embd when tied
  Tensor* rope_freqs = nullptr;   // F32 [n_rot / 2] or null
  std::vector<LlamaLayer> layers;
  // Every distinct weight tensor, and data[i] the bytes of all[i] in the
  // file (valid while the GgufFile lives).
  std::vector<Tensor*> all;
  std::vector<absl::Span<const uint8_t>> data;

  // The weights of `config` from `file`'s tensor infos, created in `ctx`
  // and flagged kFlagParam. output.weight absent means tied to token_embd.
  // Errors: INVALID_ARGUMENT "[Llama] ..." naming a missing tensor, one of
  // another shape than `config` implies, or one whose type tessera lacks
  // (norms and rope_freqs must be F32).
  static absl::StatusOr<LlamaWeights> FromGguf(const GgufFile& file,
                                               const LlamaConfig& config,
                                               Context& ctx);
};

// The KV cache of one sequence: per layer, K and V as [n_embd_kv, n_ctx]
// of `type`; row p holds position p.
struct LlamaCache {
  int64_t n_ctx = 0;
  std::vector<Tensor*> k;
  std::vector<Tensor*> v;

  // Tensors without data in `ctx`. `type` is one FLASH_ATTN_EXT reads
  // (graph/op_types.h: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1). Errors:
  // INVALID_ARGUMENT for n_ctx < 1, another type, or a quantized type whose
  // blocks do not divide the head size.
  static absl::StatusOr<LlamaCache> Make(const LlamaConfig& config,
                                         int64_t n_ctx, Type type,
                                         Context& ctx);
};

// The forward pass of `n_tokens` tokens of one sequence. The inputs are
// flagged kFlagInput, the logits kFlagOutput.
struct LlamaForward {
  int64_t n_tokens = 0;
  Tensor* tokens = nullptr;      // I32 [n_tokens]: token ids
  Tensor* positions = nullptr;   // I32 [n_tokens]: their positions
  Tensor* cache_rows = nullptr;  // I32 [n_tokens]: cache rows to write K/V to
  Tensor* mask = nullptr;        // F16 [n_ctx, n_tokens]: 0 or -inf
  Tensor* logits = nullptr;      // F32 [n_vocab, n_tokens]
  // Per layer, its first node (the attention RMS_NORM), for placement.
  std::vector<Tensor*> layer_inputs;
  Graph graph;
};

// Builds the graph (llama.cpp's build_llama): embedding GET_ROWS; per
// layer RMS_NORM * attn_norm, Q/K/V projections, ROPE (normal mode, with
// rope_freqs when present) of Q and K, K and V written to the cache with
// SET_ROWS, FLASH_ATTN_EXT of Q over the whole cache under the mask
// (grouped-query when n_head_kv < n_head), output projection and residual;
// RMS_NORM * ffn_norm, SwiGLU(gate, up), down projection and residual;
// final RMS_NORM * output_norm and the output projection. Attention reads
// the cache through the SET_ROWS results, so it follows the writes.
// Errors: INVALID_ARGUMENT from the op builders; RESOURCE_EXHAUSTED when
// the graph exceeds Graph::kDefaultMaxNodes.
absl::StatusOr<std::unique_ptr<LlamaForward>> BuildLlamaForward(
    Context& ctx, const LlamaConfig& config, const LlamaWeights& weights,
    const LlamaCache& cache, int64_t n_tokens);

// Fills `mask` (n_ctx * n_tokens F16 values, token-major) so that token t
// at position positions[t] sees cache rows 0..positions[t]: 0 there, -inf
// elsewhere (one sequence; row p holds position p).
void FillLlamaMask(absl::Span<const int32_t> positions, int64_t n_ctx,
                   absl::Span<uint16_t> mask);

}  // namespace tessera

#endif  // TESSERA_MODEL_LLAMA_H_
