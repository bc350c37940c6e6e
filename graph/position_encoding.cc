#include "graph/position_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tessera {
namespace {

// YaRN correction dimension for `n_rot` rotations (ggml's
// rope_yarn_corr_dim, in float): n_dims ln(n_ctx_orig / (2 pi n_rot)) /
// (2 ln base).
float YarnCorrDim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  constexpr float kPi = 3.14159265358979323846f;
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * kPi)) /
         (2.0f * std::log(base));
}

}  // namespace

float AlibiSlope(float max_bias, int64_t head, int64_t n_head) {
  if (!(max_bias > 0.0f)) return 1.0f;
  int64_t h = 1;
  while (h * 2 <= n_head) h *= 2;
  const float m0 = std::pow(2.0f, -max_bias / static_cast<float>(h));
  const float m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(h));
  return head < h ? std::pow(m0, static_cast<float>(head + 1))
                  : std::pow(m1, static_cast<float>(2 * (head - h) + 1));
}


RopeFrequencies RopeFrequenciesOf(const Tensor& node) {
  const int n_dims = node.op_params[1];
  const int n_ctx_orig = node.op_params[4];
  const float freq_base = node.param<float>(5);
  const float freq_scale = node.param<float>(6);
  const float ext_factor = node.param<float>(7);
  const float attn_factor = node.param<float>(8);
  const float beta_fast = node.param<float>(9);
  const float beta_slow = node.param<float>(10);
  const float low = std::max(
      0.0f, std::floor(YarnCorrDim(n_dims, n_ctx_orig, beta_fast, freq_base)));
  const float high = std::min(
      static_cast<float>(n_dims - 1),
      std::ceil(YarnCorrDim(n_dims, n_ctx_orig, beta_slow, freq_base)));

  const Tensor* factors = node.src[2];
  const int pairs = n_dims / 2;
  RopeFrequencies f;
  f.extrap.resize(pairs);
  f.ramp.assign(pairs, 0.0);
  f.freq_scale = freq_scale;
  f.mscale = attn_factor;
  if (ext_factor != 0.0f) f.mscale *= 1.0 + 0.1 * std::log(1.0 / freq_scale);
  for (int i = 0; i < pairs; ++i) {
    float factor = 1.0f;
    if (factors != nullptr) {
      std::memcpy(&factor,
                  static_cast<const char*>(factors->data) + i * factors->nb[0],
                  sizeof(factor));
    }
    f.extrap[i] =
        std::pow(static_cast<double>(freq_base), -2.0 * i / n_dims) / factor;
    if (ext_factor != 0.0f) {
      const double y =
          (i - static_cast<double>(low)) / std::max(0.001f, high - low);
      f.ramp[i] = (1.0 - std::min(1.0, std::max(0.0, y))) * ext_factor;
    }
  }
  return f;
}

void ComputeRopeAngles(const Tensor& node, double pos, RopeAngles& out) {
  const RopeFrequencies f = RopeFrequenciesOf(node);
  out.cos.resize(f.extrap.size());
  out.sin.resize(f.extrap.size());
  for (size_t i = 0; i < f.extrap.size(); ++i) {
    const double theta_extrap = pos * f.extrap[i];
    const double theta_interp = f.freq_scale * theta_extrap;
    const double theta =
        theta_interp * (1.0 - f.ramp[i]) + theta_extrap * f.ramp[i];
    out.cos[i] = std::cos(theta) * f.mscale;
    out.sin[i] = std::sin(theta) * f.mscale;
  }
}

}  // namespace tessera
