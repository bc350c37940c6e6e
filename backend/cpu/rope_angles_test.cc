#include "backend/cpu/rope_angles.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "graph/context.h"
#include "graph/ops.h"
#include "graph/position_encoding.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// A ROPE node of head size 128 with `params`; `factors` (64 values) as its
// frequency factors when not empty.
Tensor* RopeNode(Context& ctx, const RopeParams& params,
                 std::vector<float>& factors) {
  Tensor* a = ctx.NewTensor(Type::kF32, {128, 4, 8}).value();
  Tensor* pos = ctx.NewTensor(Type::kI32, {8}).value();
  Tensor* ff = nullptr;
  if (!factors.empty()) {
    ff = ctx.NewTensor(Type::kF32, {64}).value();
    ff->data = factors.data();
  }
  return Rope(ctx, a, pos, params, ff).value();
}

// Every pair at `pos` against the reference's angles, within what rotating
// in double (up to 1023 steps before an exact evaluation) can drift.
void ExpectMatches(const Tensor& node, RopeAngleCache& cache, int64_t pos) {
  RopeAngles want;
  ComputeRopeAngles(node, static_cast<double>(pos), want);
  cache.At(pos);
  // A normal-mode node's pair i is spread over floats 2i and 2i + 1, its
  // sin negated in the first.
  const bool spread = node.op_params[2] != kRopeNeox;
  for (size_t i = 0; i < want.cos.size(); ++i) {
    for (int half = 0; half < (spread ? 2 : 1); ++half) {
      const size_t at = spread ? 2 * i + half : i;
      const double sign = spread && half == 0 ? -1.0 : 1.0;
      ASSERT_NEAR(cache.cos()[at], want.cos[i], 2e-6)
          << "pos " << pos << " i " << i;
      ASSERT_NEAR(cache.sin()[at], sign * want.sin[i], 2e-6)
          << "pos " << pos << " i " << i;
    }
  }
}

// Positions in prompt order (rotations), then jumps, repeats and a
// position far out (exact evaluations).
const std::vector<int64_t>& Positions() {
  static const auto* positions = [] {
    auto* p = new std::vector<int64_t>;
    for (int64_t i = 0; i < 300; ++i) p->push_back(i);
    for (int64_t i : {5, 5, 1000, 999, 1001, 131071, 131072, 0}) {
      p->push_back(i);
    }
    for (int64_t i = 40000; i < 40100; ++i) p->push_back(i);
    return p;
  }();
  return *positions;
}

TEST(RopeAngleCacheTest, MatchesTheReferenceAngles) {
  Context ctx;
  std::vector<float> none;
  Tensor* node = RopeNode(ctx, {.n_dims = 128, .freq_base = 500000.0f}, none);
  RopeAngleCache cache(*node);
  for (int64_t p : Positions()) ExpectMatches(*node, cache, p);
}

TEST(RopeAngleCacheTest, MatchesWithYarnAndScaling) {
  Context ctx;
  std::vector<float> none;
  Tensor* node = RopeNode(ctx,
                          {.n_dims = 96,
                           .mode = kRopeNeox,
                           .n_ctx_orig = 4096,
                           .freq_scale = 0.25f,
                           .ext_factor = 1.0f,
                           .attn_factor = 0.9f},
                          none);
  RopeAngleCache cache(*node);
  for (int64_t p : Positions()) ExpectMatches(*node, cache, p);
}

TEST(RopeAngleCacheTest, MatchesWithFrequencyFactors) {
  Context ctx;
  std::vector<float> factors(64);
  for (int i = 0; i < 64; ++i) factors[i] = 1.0f + 0.5f * (i % 7);
  Tensor* node = RopeNode(ctx, {.n_dims = 128}, factors);
  RopeAngleCache cache(*node);
  for (int64_t p : Positions()) ExpectMatches(*node, cache, p);
}

}  // namespace
}  // namespace tessera
