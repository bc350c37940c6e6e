#ifndef TESSERA_TESTS_GGML_RPC_LLAMA_GRAPH_H_
#define TESSERA_TESTS_GGML_RPC_LLAMA_GRAPH_H_

// A two-layer LLaMA-shaped graph built with tessera's builders, and its
// translation to ggml-rpc tensors with the test's own ggml numbering.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "tests/ggml_rpc/ggml_rpc_client.h"

namespace tessera::testing {

struct LlamaGraph {
  std::unique_ptr<Context> ctx = std::make_unique<Context>();
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Tensor* tokens = nullptr;  // I32 [n_tokens]
  Tensor* logits = nullptr;  // F32 [n_vocab, n_tokens]
};

// Embedding (GET_ROWS), then per layer RMS_NORM, MUL, Q/K/V MUL_MATs,
// RESHAPE, ROPE, K and V written into F16 cache leafs by SET_ROWS and read
// back through VIEWs of what was written (a KV cache),
// PERMUTE, attention (MUL_MAT, SOFT_MAX with a causal mask, CONT), the
// output projection and residual ADD, the SwiGLU feed-forward (GLU), and
// the output head. Leafs have no data.
absl::StatusOr<LlamaGraph> BuildLlama();

// Deterministic host bytes for each leaf of `g` by name; `tokens` for the
// token ids.
std::map<std::string, std::vector<uint8_t>> LlamaLeafData(
    const LlamaGraph& g, const std::vector<int32_t>& tokens);

// `g` as ggml-rpc tensors: leafs at increasing offsets of the buffer at
// `weights_base`, nodes that are not views at increasing offsets of the
// buffer at `compute_base`, views at their source's address.
struct GgmlGraph {
  std::vector<GgmlTensor> tensors;
  std::vector<uint64_t> nodes;
  std::map<const Tensor*, GgmlTensor> by_tensor;
  uint64_t weights_bytes = 0;
  uint64_t compute_bytes = 0;
};
absl::StatusOr<GgmlGraph> ToGgml(const Graph& graph, uint64_t weights_ptr,
                                 uint64_t weights_base, uint64_t compute_ptr,
                                 uint64_t compute_base);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_GGML_RPC_LLAMA_GRAPH_H_
