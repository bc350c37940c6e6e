#include "backend/cpu/rope_angles.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "graph/position_encoding.h"

namespace tessera {

RopeAngleCache::RopeAngleCache(const Tensor& node) {
  const int n_dims = node.op_params[1];
  const float freq_base = node.param<float>(5);
  const float freq_scale = node.param<float>(6);
  const float ext_factor = node.param<float>(7);
  const float attn_factor = node.param<float>(8);
  const auto [low, high] = CorrDimsOf(node);

  const Tensor* factors = node.src[2];
  const int pairs = n_dims / 2;
  k_.resize(pairs);
  step_c_.resize(pairs);
  step_s_.resize(pairs);
  c_.resize(pairs);
  s_.resize(pairs);
  cos_f_.resize(pairs);
  sin_f_.resize(pairs);
  mscale_ = attn_factor;
  if (ext_factor != 0.0f) mscale_ *= 1.0 + 0.1 * std::log(1.0 / freq_scale);
  for (int i = 0; i < pairs; ++i) {
    float factor = 1.0f;
    if (factors != nullptr) {
      std::memcpy(&factor,
                  static_cast<const char*>(factors->data) + i * factors->nb[0],
                  sizeof(factor));
    }
    // theta = pos * extrap * (freq_scale (1 - ramp) + ramp).
    const double extrap =
        std::pow(static_cast<double>(freq_base), -2.0 * i / n_dims) / factor;
    double mix = freq_scale;
    if (ext_factor != 0.0f) {
      const double y =
          (i - static_cast<double>(low)) / std::max(0.001f, high - low);
      const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * ext_factor;
      mix = freq_scale * (1.0 - ramp) + ramp;
    }
    k_[i] = extrap * mix;
    step_c_[i] = std::cos(k_[i]);
    step_s_[i] = std::sin(k_[i]);
  }
}

void RopeAngleCache::At(int64_t pos) {
  if (valid_ && pos == pos_) return;
  const size_t pairs = k_.size();
  if (valid_ && pos == pos_ + 1 && steps_ < kRecompute) {
    for (size_t i = 0; i < pairs; ++i) {
      const double c = c_[i] * step_c_[i] - s_[i] * step_s_[i];
      const double s = s_[i] * step_c_[i] + c_[i] * step_s_[i];
      c_[i] = c;
      s_[i] = s;
    }
    ++steps_;
  } else {
    for (size_t i = 0; i < pairs; ++i) {
      const double theta = static_cast<double>(pos) * k_[i];
      c_[i] = std::cos(theta);
      s_[i] = std::sin(theta);
    }
    steps_ = 0;
  }
  for (size_t i = 0; i < pairs; ++i) {
    cos_f_[i] = static_cast<float>(c_[i] * mscale_);
    sin_f_[i] = static_cast<float>(s_[i] * mscale_);
  }
  pos_ = pos;
  valid_ = true;
}

}  // namespace tessera
