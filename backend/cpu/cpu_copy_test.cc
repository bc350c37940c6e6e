#include "backend/cpu/cpu_copy.h"

#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backend/alloc/tensor_allocator.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/simd_level.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// Values where rounding to F16 and BF16 matters: exact ties (round to
// even), just above and below them, overflow to infinity, F16 subnormals,
// infinities and signs; enough of them for the vector loops and a tail.
std::vector<float> RoundingCases() {
  std::vector<float> v;
  for (uint32_t mantissa : {0x1000u, 0x3000u, 0x1001u, 0x0FFFu, 0x8000u,
                            0x18000u, 0x8001u, 0x7FFFu}) {
    for (uint32_t exponent : {100u, 127u, 130u, 142u, 143u, 112u, 103u}) {
      const float f = std::bit_cast<float>((exponent << 23) | mantissa);
      v.push_back(f);
      v.push_back(-f);
    }
  }
  v.push_back(65520.0f);       // F16 overflow
  v.push_back(3.4028235e38f);  // BF16 overflow
  v.push_back(std::numeric_limits<float>::infinity());
  v.push_back(-std::numeric_limits<float>::infinity());
  v.push_back(0.0f);
  v.push_back(-0.0f);
  v.push_back(1e-8f);  // F16 subnormal
  return v;
}

// CPY F32 -> F16 and F32 -> BF16 on the CPU device round exactly as the
// scalar conversions (and so the reference kernel) do, at every level.
TEST(CpuCopyTest, ConversionsRoundAsTheScalarConversionsAtEveryLevel) {
  const std::vector<float> values = RoundingCases();
  const int64_t n = static_cast<int64_t>(values.size());
  for (Type type : {Type::kF16, Type::kBF16}) {
    Context ctx;
    Tensor* src = ctx.NewTensor(Type::kF32, {n}).value();
    Tensor* dst = ctx.NewTensor(type, {n}).value();
    Tensor* out = Cpy(ctx, src, dst).value();
    Graph graph;
    ASSERT_TRUE(graph.Expand(out).ok());
    CpuDevice host({.name = "host", .n_threads = 1});
    std::vector<Tensor*> all(graph.leafs().begin(), graph.leafs().end());
    all.insert(all.end(), graph.nodes().begin(), graph.nodes().end());
    std::unique_ptr<Buffer> buffer =
        AllocTensors(host.buffer_type(), all).value();
    ASSERT_TRUE(
        src->buffer->SetTensor(*src, values.data(), 0, n * sizeof(float)).ok());
    for (SimdLevel level : SupportedSimdLevels()) {
      CpuDevice device({.name = "cpu", .n_threads = 2, .max_simd = level});
      ASSERT_TRUE(buffer->Clear(0).ok());
      ASSERT_TRUE(
          src->buffer->SetTensor(*src, values.data(), 0, n * sizeof(float))
              .ok());
      std::unique_ptr<Stream> stream = device.CreateStream().value();
      ASSERT_TRUE(stream->Compute(graph).ok());
      std::vector<uint16_t> got(n);
      ASSERT_TRUE(
          out->buffer->GetTensor(*out, got.data(), 0, n * sizeof(uint16_t))
              .ok());
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want =
            type == Type::kF16 ? Fp32ToFp16(values[i]) : Fp32ToBf16(values[i]);
        EXPECT_EQ(got[i], want) << TypeName(type) << " at "
                                << SimdLevelName(level) << ": " << values[i];
      }
    }
  }
}

}  // namespace
}  // namespace tessera
