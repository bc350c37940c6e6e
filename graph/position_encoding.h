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

// The part of ROPE node `node`'s angles that does not depend on the
// position (ggml's rope_yarn), per rotated pair i:
//   extrap_i = base^(-2i / n_dims) / ff_i (ff_i the node's F32 freq_factors
//   src[2] value i, read through its strides; 1 without one), the angle
//   per position step before scaling;
//   ramp_i = ext_factor * (1 - clamp((i - low) / max(0.001, high - low), 0,
//   1)), YaRN's weight of the unscaled angle (0 with ext_factor 0), where
//   [low, high] are the floor/ceil of the YaRN correction dimension at
//   beta_fast/beta_slow, clamped to [0, n_dims - 1];
// and the magnitude mscale = attn_factor, times (1 + 0.1 ln(1 / freq_scale))
// with ext_factor != 0. At position pos, pair i turns by
//   theta_i = pos extrap_i freq_scale (1 - ramp_i) + pos extrap_i ramp_i.
struct RopeFrequencies {
  std::vector<double> extrap;
  std::vector<double> ramp;
  double freq_scale = 1.0;
  double mscale = 1.0;
};
RopeFrequencies RopeFrequenciesOf(const Tensor& node);

struct RopeAngles {
  std::vector<double> cos;  // one per rotated pair, scaled by mscale
  std::vector<double> sin;
};

// cos and sin of each pair's angle at position `pos` for ROPE node `node`
// (RopeFrequencies' theta_i), times mscale.
void ComputeRopeAngles(const Tensor& node, double pos, RopeAngles& out);

}  // namespace tessera

#endif  // TESSERA_GRAPH_POSITION_ENCODING_H_
