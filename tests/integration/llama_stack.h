#ifndef TESSERA_TESTS_INTEGRATION_LLAMA_STACK_H_
#define TESSERA_TESTS_INTEGRATION_LLAMA_STACK_H_

// A LLaMA-shaped layer stack with ggml's tensor names, for the tensor
// parallel tests: LlamaSplitPolicy splits its weights as a model's.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "backend/device.h"
#include "backend/meta/llama_policy.h"
#include "client/client.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "sched/testing/models.h"

namespace tessera::testing {

// RMS_NORM, Q/K/V projections, ROPE, grouped-query FLASH_ATTN_EXT under a
// causal mask (4 query heads over 2 KV heads), the output projection, a
// SwiGLU FFN and residual ADDs, kLayers times; then output_norm.
struct LlamaStack {
  static constexpr int kLayers = 2;
  static constexpr int64_t kHeadDim = 16;
  static constexpr int64_t kHeads = 4;
  static constexpr int64_t kKvHeads = 2;
  static constexpr int64_t kDim = kHeadDim * kHeads;
  static constexpr int64_t kKvDim = kHeadDim * kKvHeads;
  static constexpr int64_t kFf = 96;
  static constexpr int64_t kTokens = 8;

  struct Layer {
    Tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *gate, *up, *down;
  };

  static LlamaSplitOptions SplitOptions() {
    return {.head_dim = kHeadDim, .gqa_ratio = kHeads / kKvHeads};
  }

  // Weights in `device`'s memory (its policy, if any, applies to writes).
  explicit LlamaStack(Device& device);

  // Host inputs of run `k`.
  struct Inputs {
    std::vector<float> x;
    std::vector<int32_t> pos;
    std::vector<uint16_t> mask;
  };
  static Inputs MakeInputs(int k);
  std::vector<client::TensorInput> Bind(const Inputs& in) const;

  // Runs the stack on a stream of `device`, the weights' device, with the
  // inputs of run `k`; returns y. Inputs and activations are in `compute`,
  // allocated on `device` by the first call.
  std::vector<float> RunOn(Device& device, int k);

  Context wctx;
  std::vector<Tensor*> weights;
  std::vector<Layer> layers;
  Tensor* output_norm = nullptr;
  std::unique_ptr<Buffer> buffer;

  Context ctx;
  Tensor *x, *pos, *mask, *y;
  Graph graph;
  std::unique_ptr<Buffer> compute;

 private:
  Tensor* Weight(std::string name, std::vector<int64_t> ne);
  void BuildGraph();
};

// The stack's y for the inputs of run `k` on one local CPU device.
std::vector<float> Local(int k);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_INTEGRATION_LLAMA_STACK_H_
