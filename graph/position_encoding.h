#ifndef TESSERA_GRAPH_POSITION_ENCODING_H_
#define TESSERA_GRAPH_POSITION_ENCODING_H_

#include <cstdint>
#include <vector>

#include "graph/tensor.h"

namespace tessera {

// ALiBi slope of `head` of `n_head` (ggml's formula, in float): with h the
// largest power of two <= n_head, m0 = 2^(-max_bias / h), m1 = 2^(-max_bias
// / 2 / h); slope = m0^(head + 1) for head < h, else m1^(2 (head - h) + 1).
// 1 when max_bias <= 0.
float AlibiSlope(float max_bias, int64_t head, int64_t n_head);

// YaRN's correction dims of ROPE node `node`: floor/ceil of the YaRN
// correction dimension at beta_fast/beta_slow, clamped to [0, n_dims - 1].
struct RopeCorrDims {
  float low;
  float high;
};
RopeCorrDims CorrDimsOf(const Tensor& node);

struct RopeAngles {
  std::vector<double> cos;  // one per rotated pair, scaled by mscale
  std::vector<double> sin;
};

// cos and sin of each pair's angle at position `pos` for ROPE node `node`
// (ggml's rope_yarn):
//   theta_extrap = pos * base^(-2i / n_dims) / ff_i (ff_i the node's F32
//   freq_factors src[2] value i, read through its strides; 1 without one),
//   theta_interp = freq_scale *
//   theta_extrap; with ext_factor != 0, ramp = ext_factor * (1 - clamp((i -
//   low) / max(0.001, high - low), 0, 1)) mixes them as theta = theta_interp
//   (1 - ramp) + theta_extrap ramp and mscale = attn_factor (1 + 0.1
//   ln(1 / freq_scale)); otherwise theta = theta_interp, mscale =
//   attn_factor. [low, high] are CorrDimsOf(node).
void ComputeRopeAngles(const Tensor& node, double pos, RopeAngles& out);

}  // namespace tessera

#endif  // TESSERA_GRAPH_POSITION_ENCODING_H_
