#ifndef TESSERA_BACKEND_CPU_ROPE_ANGLES_H_
#define TESSERA_BACKEND_CPU_ROPE_ANGLES_H_

#include <cstdint>
#include <vector>

#include "graph/tensor.h"

namespace tessera {

// RoPE's cos and sin per rotated pair for the positions of one ROPE node,
// equal to ComputeRopeAngles (graph/position_encoding.h) within double
// rounding, without its per-position pow and log: every pair's angle is
// pos * k_i with k_i (frequency, frequency factor, YaRN mix) and the
// magnitude mscale fixed per node. The next position (pos + 1) is a
// rotation of the previous angles by k_i (four multiplies a pair); other
// positions, and every kRecompute-th step, call cos and sin. Used by one
// thread.
class RopeAngleCache {
 public:
  // `node` is a ROPE node; its frequency factors (src[2], F32) are read
  // now.
  explicit RopeAngleCache(const Tensor& node);

  // cos and sin of each pair at `pos`, scaled by mscale, as floats, in the
  // layout of CpuKernels::rope (spread over both values of a pair for a
  // normal-mode node); valid until the next call.
  void At(int64_t pos);
  const float* cos() const { return cos_f_.data(); }
  const float* sin() const { return sin_f_.data(); }

 private:
  static constexpr int kRecompute = 1024;

  std::vector<double> k_;      // angle per position step, per pair
  // cos(k_i), sin(k_i), from the first rotation on (a decode step's node
  // has one position and needs none).
  std::vector<double> step_c_;
  std::vector<double> step_s_;
  double mscale_ = 1.0;
  std::vector<double> c_;  // unscaled cos and sin at pos_
  std::vector<double> s_;
  std::vector<float> cos_f_;
  std::vector<float> sin_f_;
  bool spread_ = false;  // normal mode: pairs (2i, 2i + 1)
  bool valid_ = false;
  int64_t pos_ = 0;
  int steps_ = 0;  // rotations since the last direct evaluation
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_ROPE_ANGLES_H_
