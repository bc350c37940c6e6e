#ifndef TESSERA_BACKEND_META_LLAMA_POLICY_H_
#define TESSERA_BACKEND_META_LLAMA_POLICY_H_

// Ready-made split policies (backend/meta/meta_device.h SplitPolicy).

#include <cstdint>

#include "backend/meta/meta_device.h"

namespace tessera {

// Every weight MIRRORED (data parallel copies; useful as a reference).
SplitPolicy MirroredPolicy();

struct LlamaSplitOptions {
  // Values per attention head; Q/K/V/O are split on whole heads.
  int64_t head_dim = 128;
  // Query heads per KV head (grouped-query attention): Q and O are split in
  // groups of this many heads, so that member i's query heads use its KV
  // heads.
  int64_t gqa_ratio = 1;
  // Units of the FFN split (gate/up rows, down columns); quantized down
  // weights need whole blocks along axis 0, so use the block size (32, or
  // 256 for K-quants) for quantized models.
  int64_t ffn_granularity = 1;
};

// LLaMA-style layers by ggml's tensor names:
//   column parallel (split on the output-feature axis 1 of [in, out]):
//     attn_q, attn_k, attn_v (whole heads), ffn_gate, ffn_up;
//     attn_qkv as three segments Q, K, V (K and V of n_kv heads);
//   row parallel (split on the input axis 0): attn_output (whole heads),
//     ffn_down;
//   the KV cache (model/llama.h: cache_k.L, cache_v.L, [n_embd_kv, n_ctx])
//     split on axis 0 in whole heads, as attn_k and attn_v's outputs are, so
//     that each member writes and attends over its own KV heads;
//   with fewer KV heads than members: one KV head (attn_k, attn_v and the
//     cache) MIRRORED while Q and O split on single heads, all of which
//     read it; several KV heads keep the whole attention MIRRORED;
//   everything else (token_embd, norms, output) MIRRORED, as is any weight
//   whose split would not fit (it is then computed whole on every member).
SplitPolicy LlamaSplitPolicy(int n_members, LlamaSplitOptions options);

}  // namespace tessera

#endif  // TESSERA_BACKEND_META_LLAMA_POLICY_H_
