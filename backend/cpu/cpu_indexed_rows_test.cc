#include "backend/cpu/cpu_indexed_rows.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_level.h"
#include "base/status_macros.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/reference.h"
#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// Bytes from a fixed sequence: every bit pattern of the quantized levels
// (Q8_0's -128 included) and of F16/BF16 values. Block scales are set to
// finite F16 values, small and large, so that each product is a number.
std::vector<char> TableBytes(const Tensor& t) {
  std::vector<char> bytes(t.NumBytes());
  uint32_t s = 12345;
  for (char& c : bytes) {
    s = s * 1664525u + 1013904223u;
    c = static_cast<char>(s >> 24);
  }
  const TypeTraits& traits = Traits(t.type);
  if (traits.is_quantized && t.type != Type::kQ4_K && t.type != Type::kQ6_K) {
    // 32-value blocks begin with their F16 scale; Q4_1 and Q5_1 follow it
    // with an F16 minimum.
    const float scales[] = {0.5f, -3.0e-3f, 1.0e4f, 6.1e-5f, -65504.0f};
    const bool min = t.type == Type::kQ4_1 || t.type == Type::kQ5_1;
    for (size_t b = 0; b * traits.type_size < bytes.size(); ++b) {
      const uint16_t d = Fp32ToFp16(scales[b % 5]);
      std::memcpy(bytes.data() + b * traits.type_size, &d, sizeof(d));
      if (min) {
        const uint16_t m = Fp32ToFp16(-0.37f * scales[(b + 2) % 5]);
        std::memcpy(bytes.data() + b * traits.type_size + 2, &m, sizeof(m));
      }
    }
  }
  if (t.type == Type::kF16 || t.type == Type::kBF16) {
    // No NaN: an exponent of all ones loses its lower bits.
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + i, 2);
      const uint16_t exp = t.type == Type::kF16 ? 0x7C00 : 0x7F80;
      if ((h & exp) == exp) h &= static_cast<uint16_t>(~(exp & (exp >> 1)));
      std::memcpy(bytes.data() + i, &h, 2);
    }
  }
  return bytes;
}

// Runs `fast` on `node` as both parts of a team of two at `level` (one
// after the other); returns how many parts took the fast path.
int FastParts(bool (*fast)(Tensor&, const CpuComputeContext&), Tensor& node,
              SimdLevel level) {
  const auto no_barrier = [] {};
  int taken = 0;
  for (int ith = 0; ith < 2; ++ith) {
    const CpuComputeContext ctx{.ith = ith,
                                .nth = 2,
                                .kernels = &KernelsFor(level),
                                .work = nullptr,
                                .barrier = no_barrier};
    taken += fast(node, ctx) ? 1 : 0;
  }
  return taken;
}

// Computes `graph` on a CPU device of two threads at `level`.
absl::Status ComputeOnDevice(const Graph& graph, SimdLevel level) {
  CpuDevice device(
      {.name = "cpu", .n_threads = 2, .memory_limit = 0, .max_simd = level});
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                           device.CreateStream());
  return stream->Compute(graph);
}

// A graph of one op whose tensors are placed in one host buffer.
struct HostGraph {
  Context ctx;
  Graph graph;
  CpuDevice host{{.name = "host", .n_threads = 1, .memory_limit = 0}};
  std::unique_ptr<Buffer> buffer;

  // Expands the graph of `out` and places its tensors.
  void Place(Tensor* out) {
    EXPECT_TRUE(graph.Expand(out).ok());
    std::vector<Tensor*> all(graph.leafs().begin(), graph.leafs().end());
    all.insert(all.end(), graph.nodes().begin(), graph.nodes().end());
    buffer = AllocTensors(host.buffer_type(), all).value();
  }
};

// GET_ROWS of a table of `type` [k, n_rows, 2, 2] by indices [n, 2, 2].
struct Gather : HostGraph {
  Tensor* table = nullptr;
  Tensor* idx = nullptr;
  Tensor* out = nullptr;

  Gather(Type type, int64_t k, int64_t n_rows, int64_t n) {
    table = ctx.NewTensor(type, {k, n_rows, 2, 2}).value();
    idx = ctx.NewTensor(Type::kI32, {n, 2, 2}).value();
    out = GetRows(ctx, table, idx).value();
    Place(out);
  }

  // Clears the buffer, then writes the table's bytes and the indices.
  absl::Status Fill(const std::vector<int32_t>& indices) {
    TESSERA_RETURN_IF_ERROR(buffer->Clear(0));
    TESSERA_RETURN_IF_ERROR(buffer->SetTensor(*table, TableBytes(*table).data(),
                                              0, table->NumBytes()));
    return buffer->SetTensor(*idx, indices.data(), 0, idx->NumBytes());
  }

  std::vector<char> Bytes(const Tensor& t) const {
    std::vector<char> bytes(t.NumBytes());
    EXPECT_TRUE(buffer->GetTensor(t, bytes.data(), 0, bytes.size()).ok());
    return bytes;
  }
};

// GET_ROWS of every storage type, with repeated and reversed indices over
// both outer dimensions, at every SIMD level equals the reference kernel
// bit for bit: F16, BF16 and 32-value block rows go through the level's own
// conversions, which must round as the reference dequantizers do. Both
// parts of a team of two take the fast path, and so does the device.
TEST(CpuIndexedRowsTest, GetRowsOfEveryTypeEqualTheReference) {
  for (Type type : {Type::kF32, Type::kF16, Type::kBF16, Type::kQ8_0,
                    Type::kQ4_0, Type::kQ4_1, Type::kQ5_0, Type::kQ5_1,
                    Type::kQ4_K, Type::kQ6_K, Type::kI32}) {
    const std::string what(TypeName(type));
    constexpr int64_t kK = 512, kRows = 9, kN = 37;
    Gather g(type, kK, kRows, kN);
    std::vector<int32_t> idx(4 * kN);
    for (int64_t i = 0; i < kN; ++i) {
      idx[i] = static_cast<int32_t>((i * 5) % kRows);
      idx[kN + i] = static_cast<int32_t>(kRows - 1 - i % kRows);
      idx[2 * kN + i] = static_cast<int32_t>((i * 2) % kRows);
      idx[3 * kN + i] = static_cast<int32_t>((i + 4) % kRows);
    }
    ASSERT_TRUE(g.Fill(idx).ok());
    ASSERT_TRUE(ReferenceCompute(*g.out).ok()) << what;
    const std::vector<char> want = g.Bytes(*g.out);
    for (SimdLevel level : SupportedSimdLevels()) {
      ASSERT_TRUE(g.Fill(idx).ok());
      EXPECT_EQ(FastParts(TryGetRows, *g.out, level), 2)
          << what << " at " << SimdLevelName(level);
      EXPECT_TRUE(g.Bytes(*g.out) == want)
          << what << " in parts at " << SimdLevelName(level);
      ASSERT_TRUE(g.Fill(idx).ok());
      ASSERT_TRUE(ComputeOnDevice(g.graph, level).ok()) << what;
      EXPECT_TRUE(g.Bytes(*g.out) == want)
          << what << " at " << SimdLevelName(level);
    }
  }
}

// An index out of range, among the first part's rows or the last part's,
// makes both parts refuse the fast path (the reference kernel then reports
// it), and on the device is an error that names it.
TEST(CpuIndexedRowsTest, GetRowsIndexOutOfRangeIsAnError) {
  for (int32_t bad : {-1, 9, 1 << 30}) {
    for (int64_t at : {int64_t{0}, int64_t{140}}) {
      Gather g(Type::kQ8_0, 64, 9, 37);
      std::vector<int32_t> idx(4 * 37, 3);
      idx[at] = bad;
      for (SimdLevel level : SupportedSimdLevels()) {
        ASSERT_TRUE(g.Fill(idx).ok());
        EXPECT_EQ(FastParts(TryGetRows, *g.out, level), 0);
        ASSERT_TRUE(g.Fill(idx).ok());
        const absl::Status status = ComputeOnDevice(g.graph, level);
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
            << status << " " << SimdLevelName(level);
        EXPECT_NE(status.message().find(absl::StrCat("row index ", bad)),
                  std::string::npos)
            << status;
      }
    }
  }
}

// SET_ROWS of F32 rows [k, 5, 2, 2] into a destination of `type`
// [k, 11, 2, 2] at indices of `index_type` [5, 1, 2] (broadcast over
// dimension 2, one set per index of dimension 3).
struct Scatter : HostGraph {
  Tensor* dst = nullptr;
  Tensor* rows = nullptr;
  Tensor* idx = nullptr;
  Tensor* out = nullptr;

  Scatter(Type type, Type index_type, int64_t k) {
    dst = ctx.NewTensor(type, {k, 11, 2, 2}).value();
    rows = ctx.NewTensor(Type::kF32, {k, 5, 2, 2}).value();
    idx = ctx.NewTensor(index_type, {5, 1, 2}).value();
    out = SetRows(ctx, dst, rows, idx).value();
    Place(out);
  }

  // Writes the destination's old bytes, the rows and the indices.
  absl::Status Fill(const std::vector<int64_t>& indices) {
    TESSERA_RETURN_IF_ERROR(
        buffer->SetTensor(*dst, TableBytes(*dst).data(), 0, dst->NumBytes()));
    std::vector<float> values(rows->NumElements());
    uint32_t s = 7;
    for (float& v : values) {
      s = s * 1664525u + 1013904223u;
      v = static_cast<float>(static_cast<int32_t>(s)) * 1e-6f;
    }
    TESSERA_RETURN_IF_ERROR(
        buffer->SetTensor(*rows, values.data(), 0, rows->NumBytes()));
    std::vector<char> bytes(idx->NumBytes());
    for (size_t i = 0; i < indices.size(); ++i) {
      if (idx->type == Type::kI64) {
        std::memcpy(bytes.data() + 8 * i, &indices[i], 8);
      } else {
        const int32_t v = static_cast<int32_t>(indices[i]);
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      }
    }
    return buffer->SetTensor(*idx, bytes.data(), 0, bytes.size());
  }

  std::vector<char> Bytes() const {
    std::vector<char> bytes(dst->NumBytes());
    EXPECT_TRUE(buffer->GetTensor(*dst, bytes.data(), 0, bytes.size()).ok());
    return bytes;
  }
};

// SET_ROWS into every storable type, with I32 and I64 indices broadcast
// over dimension 2, at every SIMD level equals the reference kernel
// bit for bit (F16 and BF16 rounded by the level's conversions, quantized
// rows by the reference quantizers); rows not indexed keep their bytes.
// Both parts of a team of two take the fast path, and so does the device.
TEST(CpuIndexedRowsTest, SetRowsIntoEveryTypeEqualsTheReference) {
  const std::vector<int64_t> indices = {4, 0, 10, 7, 2, 9, 1, 3, 8, 6};
  for (Type type :
       {Type::kF32, Type::kF16, Type::kBF16, Type::kQ8_0, Type::kQ4_0}) {
    for (Type index_type : {Type::kI32, Type::kI64}) {
      const std::string what = absl::StrCat(std::string(TypeName(type)), " at ",
                                            std::string(TypeName(index_type)));
      Scatter sc(type, index_type, 96);
      ASSERT_TRUE(sc.Fill(indices).ok());
      ASSERT_TRUE(ReferenceCompute(*sc.out).ok()) << what;
      const std::vector<char> want = sc.Bytes();
      ASSERT_FALSE(want == TableBytes(*sc.dst)) << what;
      for (SimdLevel level : SupportedSimdLevels()) {
        ASSERT_TRUE(sc.Fill(indices).ok());
        EXPECT_EQ(FastParts(TrySetRows, *sc.out, level), 2)
            << what << " " << SimdLevelName(level);
        EXPECT_TRUE(sc.Bytes() == want)
            << what << " in parts at " << SimdLevelName(level);
        ASSERT_TRUE(sc.Fill(indices).ok());
        ASSERT_TRUE(ComputeOnDevice(sc.graph, level).ok()) << what;
        EXPECT_TRUE(sc.Bytes() == want) << what << " " << SimdLevelName(level);
      }
    }
  }
}

// A SET_ROWS index out of range is an error that names it.
TEST(CpuIndexedRowsTest, SetRowsIndexOutOfRangeIsAnError) {
  for (int64_t bad : {int64_t{-1}, int64_t{11}, int64_t{1} << 40}) {
    Scatter sc(Type::kF16, Type::kI64, 32);
    std::vector<int64_t> indices = {4, 0, 10, 7, 2, 9, 1, 3, 8, 6};
    indices[7] = bad;
    for (SimdLevel level : SupportedSimdLevels()) {
      ASSERT_TRUE(sc.Fill(indices).ok());
      const absl::Status status = ComputeOnDevice(sc.graph, level);
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_NE(status.message().find(absl::StrCat("row index ", bad)),
                std::string::npos)
          << status;
    }
  }
}

}  // namespace
}  // namespace tessera
