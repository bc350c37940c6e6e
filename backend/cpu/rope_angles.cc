#include "backend/cpu/rope_angles.h"

#include <cmath>

#include "graph/position_encoding.h"

namespace tessera {

RopeAngleCache::RopeAngleCache(const Tensor& node) {
  const RopeFrequencies f = RopeFrequenciesOf(node);
  const size_t pairs = f.extrap.size();
  k_.resize(pairs);
  step_c_.resize(pairs);
  step_s_.resize(pairs);
  c_.resize(pairs);
  s_.resize(pairs);
  spread_ = node.op_params[2] != kRopeNeox;
  cos_f_.resize(spread_ ? 2 * pairs : pairs);
  sin_f_.resize(cos_f_.size());
  mscale_ = f.mscale;
  for (size_t i = 0; i < pairs; ++i) {
    k_[i] = f.extrap[i] * (f.freq_scale * (1.0 - f.ramp[i]) + f.ramp[i]);
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
  if (spread_) {
    for (size_t i = 0; i < pairs; ++i) {
      const float c = static_cast<float>(c_[i] * mscale_);
      const float s = static_cast<float>(s_[i] * mscale_);
      cos_f_[2 * i] = c;
      cos_f_[2 * i + 1] = c;
      sin_f_[2 * i] = -s;
      sin_f_[2 * i + 1] = s;
    }
  } else {
    for (size_t i = 0; i < pairs; ++i) {
      cos_f_[i] = static_cast<float>(c_[i] * mscale_);
      sin_f_[i] = static_cast<float>(s_[i] * mscale_);
    }
  }
  pos_ = pos;
  valid_ = true;
}

}  // namespace tessera
