#include "backend/cpu/cpu_flash_attn.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/simd_level.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/reference.h"
#include "graph/type.h"
#include "gtest/gtest.h"
#include "sched/testing/models.h"

namespace tessera {
namespace {

// Deterministic values in [-1, 1).
std::vector<float> Pattern(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

// A FLASH_ATTN_EXT graph over q F32 [d, n_q, heads], k and v of `kt` and
// `vt` [d, n_kv, kv_heads] and a mask [n_kv, n_q] of `mask_type`, its
// tensors placed in host memory.
struct Attention {
  Context ctx;
  Tensor* q = nullptr;
  Tensor* k = nullptr;
  Tensor* v = nullptr;
  Tensor* mask = nullptr;
  Tensor* out = nullptr;
  Graph graph;
  CpuDevice host{{.name = "host", .n_threads = 1, .memory_limit = 0}};
  std::unique_ptr<Buffer> buffer;

  Attention(int64_t d, int64_t n_q, int64_t n_kv, int64_t heads,
            int64_t kv_heads, Type kt, Type vt, float scale, float max_bias,
            float softcap, Type mask_type = Type::kF16) {
    q = ctx.NewTensor(Type::kF32, {d, n_q, heads}).value();
    k = ctx.NewTensor(kt, {d, n_kv, kv_heads}).value();
    v = ctx.NewTensor(vt, {d, n_kv, kv_heads}).value();
    mask = ctx.NewTensor(mask_type, {n_kv, n_q}).value();
    out = FlashAttnExt(ctx, q, k, v, mask, scale, max_bias, softcap).value();
    EXPECT_TRUE(graph.Expand(out).ok());
    std::vector<Tensor*> all(graph.leafs().begin(), graph.leafs().end());
    all.insert(all.end(), graph.nodes().begin(), graph.nodes().end());
    buffer = AllocTensors(host.buffer_type(), all).value();
  }

  // Fills `out` with 7s, so a device that leaves it alone is seen.
  absl::Status Poison() {
    const std::vector<float> sevens(out->NumElements(), 7.0f);
    return buffer->SetTensor(*out, sevens.data(), 0, out->NumBytes());
  }

  // Writes `values` into `t`, converted to its type.
  static absl::Status Set(Tensor& t, const std::vector<float>& values) {
    std::vector<char> bytes(t.NumBytes());
    RowFromFloat(t.type, values.data(), bytes.data(), t.NumElements());
    return testing::Write(t, bytes.data());
  }

  // `out` as a CPU device of `threads` threads at `level` computes it
  // (poisoned first).
  absl::StatusOr<std::vector<float>> ComputeAt(SimdLevel level, int threads) {
    CpuDevice device({.name = "cpu",
                      .n_threads = threads,
                      .memory_limit = 0,
                      .max_simd = level});
    if (absl::Status s = Poison(); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Stream>> stream = device.CreateStream();
    if (!stream.ok()) return stream.status();
    if (absl::Status s = (*stream)->Compute(graph); !s.ok()) return s;
    return testing::Read(*out);
  }
};

// Causal attention with -inf in the mask, at every SIMD level, against the
// reference kernel: query row 0 sees no key at all (its output is 0), the
// others see a prefix of the keys, so whole key tiles are excluded for
// some rows and partly for others, over GQA groups, ALiBi and softcap.
// Excluded keys whose rows hold NaN (unwritten cache slots) do not count.
TEST(CpuFlashAttnTest, InfiniteMaskMatchesReferenceAtEveryLevel) {
  constexpr int64_t kD = 40, kQ = 7, kKv = 200, kHeads = 6, kKvHeads = 2;
  Attention a(kD, kQ, kKv, kHeads, kKvHeads, Type::kF16, Type::kF16, 0.3f, 2.0f,
              5.0f);
  Tensor* q = a.q;
  Tensor* k = a.k;
  Tensor* v = a.v;
  Tensor* mask = a.mask;
  Tensor* out = a.out;
  ASSERT_TRUE(testing::Write(*q, Pattern(q->NumElements(), 1).data()).ok());
  auto to_f16 = [](const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = Fp32ToFp16(x[i]);
    return h;
  };
  // Keys 180 and up are excluded for every query; their rows hold NaN, as
  // cache slots never written may.
  std::vector<uint16_t> k16 = to_f16(Pattern(k->NumElements(), 2));
  std::vector<uint16_t> v16 = to_f16(Pattern(v->NumElements(), 3));
  constexpr uint16_t kNan = 0x7E00;
  for (int64_t h = 0; h < kKvHeads; ++h) {
    for (int64_t j = 180; j < kKv; ++j) {
      for (int64_t t = 0; t < kD; ++t) {
        k16[(h * kKv + j) * kD + t] = kNan;
        v16[(h * kKv + j) * kD + t] = kNan;
      }
    }
  }
  ASSERT_TRUE(testing::Write(*k, k16.data()).ok());
  ASSERT_TRUE(testing::Write(*v, v16.data()).ok());
  std::vector<float> m(kKv * kQ);
  const std::vector<float> noise = Pattern(m.size(), 4);
  for (int64_t i = 0; i < kQ; ++i) {
    for (int64_t j = 0; j < kKv; ++j) {
      const bool visible = i > 0 && j < 30 * i && j < 180;
      m[i * kKv + j] = visible ? noise[i * kKv + j]
                               : -std::numeric_limits<float>::infinity();
    }
  }
  ASSERT_TRUE(testing::Write(*mask, to_f16(m).data()).ok());

  ASSERT_TRUE(ReferenceCompute(*out).ok());
  const std::vector<float> want = testing::Read(*out);
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t t = 0; t < kD; ++t) ASSERT_EQ(want[h * kD + t], 0.0f);
  }
  for (SimdLevel level : SupportedSimdLevels()) {
    absl::StatusOr<std::vector<float>> computed = a.ComputeAt(level, 2);
    ASSERT_TRUE(computed.ok()) << computed.status();
    const std::vector<float>& got = *computed;
    double err = 0, ref = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << SimdLevelName(level) << " " << i;
      err += (got[i] - want[i]) * (got[i] - want[i]);
      ref += want[i] * want[i];
    }
    EXPECT_LT(err / ref, 1e-6) << SimdLevelName(level);
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t t = 0; t < kD; ++t) {
        EXPECT_EQ(got[h * kD + t], 0.0f) << SimdLevelName(level);
      }
    }
  }
}

// Keys that no query of a unit sees are skipped in runs: a run longer than
// a tile (256 keys), holes between runs, a key seen by some query rows
// only, one live key alone at the end, and units (rows 0-7, 8-9) that see
// different keys, with F16 and F32 masks, over 2 threads, at every SIMD
// level, against the reference kernel. The rows no query sees hold NaN.
TEST(CpuFlashAttnTest, KeysNoQuerySeesAreSkippedAndResultsMatchReference) {
  constexpr int64_t kD = 64, kQ = 10, kKv = 700, kHeads = 4, kKvHeads = 2;
  auto visible = [](int64_t i, int64_t j) {
    const bool hole = i % 2 == 0 && j >= 400 && j < 420;
    return j < 10 + 3 * i || (j >= 300 && j < 650 && !hole) || j == 699;
  };
  auto seen = [&](int64_t j) {
    for (int64_t i = 0; i < kQ; ++i) {
      if (visible(i, j)) return true;
    }
    return false;
  };
  for (Type mask_type : {Type::kF16, Type::kF32}) {
    Attention a(kD, kQ, kKv, kHeads, kKvHeads, Type::kF16, Type::kF16, 0.125f,
                0.0f, 0.0f, mask_type);
    ASSERT_TRUE(
        testing::Write(*a.q, Pattern(a.q->NumElements(), 1).data()).ok());
    std::vector<float> k = Pattern(a.k->NumElements(), 2);
    std::vector<float> v = Pattern(a.v->NumElements(), 3);
    for (int64_t h = 0; h < kKvHeads; ++h) {
      for (int64_t j = 0; j < kKv; ++j) {
        if (seen(j)) continue;
        for (int64_t t = 0; t < kD; ++t) {
          k[(h * kKv + j) * kD + t] = std::nanf("");
          v[(h * kKv + j) * kD + t] = std::nanf("");
        }
      }
    }
    ASSERT_TRUE(Attention::Set(*a.k, k).ok());
    ASSERT_TRUE(Attention::Set(*a.v, v).ok());
    std::vector<float> m = Pattern(kKv * kQ, 4);
    for (int64_t i = 0; i < kQ; ++i) {
      for (int64_t j = 0; j < kKv; ++j) {
        if (!visible(i, j)) {
          m[i * kKv + j] = -std::numeric_limits<float>::infinity();
        }
      }
    }
    ASSERT_TRUE(Attention::Set(*a.mask, m).ok());
    ASSERT_TRUE(ReferenceCompute(*a.out).ok());
    const std::vector<float> want = testing::Read(*a.out);
    for (SimdLevel level : SupportedSimdLevels()) {
      absl::StatusOr<std::vector<float>> got = a.ComputeAt(level, 2);
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_TRUE(std::isfinite((*got)[i]))
            << SimdLevelName(level) << " " << TypeName(mask_type) << " " << i;
      }
      EXPECT_LT(testing::Nmse(*got, want), 1e-6)
          << SimdLevelName(level) << " " << TypeName(mask_type);
    }
  }
}

// A decode step over a cache's capacity reads only the positions the mask
// leaves in use: the pages of K and V past them are made unreadable while
// the device computes, so reading one would crash the test.
TEST(CpuFlashAttnTest, PositionsTheMaskExcludesAreNeverRead) {
  constexpr int64_t kD = 64, kKv = 1024, kUsed = 96, kHeads = 4;
  Attention a(kD, 1, kKv, kHeads, 1, Type::kF16, Type::kF16, 0.125f, 0.0f,
              0.0f);
  ASSERT_TRUE(testing::Write(*a.q, Pattern(a.q->NumElements(), 1).data()).ok());
  std::vector<float> mask(kKv, 0.0f);
  for (int64_t j = kUsed; j < kKv; ++j) {
    mask[j] = -std::numeric_limits<float>::infinity();
  }
  ASSERT_TRUE(Attention::Set(*a.mask, mask).ok());
  ASSERT_TRUE(Attention::Set(*a.k, Pattern(kKv * kD, 2)).ok());
  ASSERT_TRUE(Attention::Set(*a.v, Pattern(kKv * kD, 3)).ok());
  ASSERT_TRUE(ReferenceCompute(*a.out).ok());
  const std::vector<float> want = testing::Read(*a.out);

  // The whole pages of K's and V's excluded rows.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  struct Range {
    void* begin;
    size_t bytes;
  };
  std::vector<Range> excluded;
  for (Tensor* t : {a.k, a.v}) {
    const auto base = reinterpret_cast<uintptr_t>(t->data);
    const uintptr_t begin = (base + kUsed * t->nb[1] + page - 1) / page * page;
    const uintptr_t end = (base + t->NumBytes()) / page * page;
    ASSERT_GE(end, begin + 16 * page);  // most of the excluded rows
    excluded.push_back({reinterpret_cast<void*>(begin), end - begin});
  }
  for (SimdLevel level : SupportedSimdLevels()) {
    CpuDevice device(
        {.name = "cpu", .n_threads = 2, .memory_limit = 0, .max_simd = level});
    ASSERT_TRUE(a.Poison().ok());
    std::unique_ptr<Stream> stream = device.CreateStream().value();
    for (const Range& r : excluded) {
      ASSERT_EQ(mprotect(r.begin, r.bytes, PROT_NONE), 0);
    }
    const absl::Status computed = stream->Compute(a.graph);
    for (const Range& r : excluded) {
      ASSERT_EQ(mprotect(r.begin, r.bytes, PROT_READ | PROT_WRITE), 0);
    }
    ASSERT_TRUE(computed.ok()) << computed;
    const std::vector<float> got = testing::Read(*a.out);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4f) << SimdLevelName(level) << " " << i;
    }
  }
}

// A value row that one query sees and another excludes (query rows are
// scored in groups that share each loaded row): only the query that sees
// it gets its infinity; the other's output equals the reference's, finite.
TEST(CpuFlashAttnTest, AnExcludedValueRowCountsOnlyForTheQueriesThatSeeIt) {
  constexpr int64_t kD = 32, kQ = 2, kKv = 8;
  Attention a(kD, kQ, kKv, 1, 1, Type::kF32, Type::kF32, 0.2f, 0.0f, 0.0f);
  ASSERT_TRUE(testing::Write(*a.q, Pattern(kD * kQ, 1).data()).ok());
  ASSERT_TRUE(testing::Write(*a.k, Pattern(kD * kKv, 2).data()).ok());
  std::vector<float> v = Pattern(kD * kKv, 3);
  for (int64_t t = 0; t < kD; ++t) {
    v[3 * kD + t] = std::numeric_limits<float>::infinity();
  }
  ASSERT_TRUE(testing::Write(*a.v, v.data()).ok());
  std::vector<uint16_t> mask(kKv * kQ, Fp32ToFp16(0.0f));
  mask[3] = Fp32ToFp16(-std::numeric_limits<float>::infinity());  // row 0
  ASSERT_TRUE(testing::Write(*a.mask, mask.data()).ok());
  ASSERT_TRUE(ReferenceCompute(*a.out).ok());
  const std::vector<float> want = testing::Read(*a.out);
  for (int64_t t = 0; t < kD; ++t) {
    ASSERT_TRUE(std::isfinite(want[t]));
    ASSERT_FALSE(std::isfinite(want[kD + t]));
  }
  for (SimdLevel level : SupportedSimdLevels()) {
    absl::StatusOr<std::vector<float>> computed = a.ComputeAt(level, 1);
    ASSERT_TRUE(computed.ok()) << computed.status();
    const std::vector<float>& got = *computed;
    for (int64_t t = 0; t < kD; ++t) {
      EXPECT_NEAR(got[t], want[t], 1e-5f) << SimdLevelName(level) << " " << t;
      EXPECT_FALSE(std::isfinite(got[kD + t])) << SimdLevelName(level);
    }
  }
}

// Keys and values read in place from views of caches laid out as llama.cpp
// keeps them (a row per position holding every KV head: nb[1] spans all
// heads, nb[2] one head), with a head size (44) and key count (67) that
// leave tails at every vector width, agree with the reference kernel.
TEST(CpuFlashAttnTest, StridedCacheViewsMatchReferenceAtEveryLevel) {
  constexpr int64_t kD = 44, kQ = 5, kKv = 67, kCtx = 80, kHeads = 6,
                    kKvHeads = 2;
  for (Type type : {Type::kF16, Type::kBF16, Type::kF32}) {
    Context ctx;
    const size_t size = Traits(type).type_size;
    Tensor* q = ctx.NewTensor(Type::kF32, {kD, kQ, kHeads}).value();
    Tensor* k_cache = ctx.NewTensor(type, {kD * kKvHeads, kCtx}).value();
    Tensor* v_cache = ctx.NewTensor(type, {kD * kKvHeads, kCtx}).value();
    Tensor* mask = ctx.NewTensor(Type::kF16, {kKv, kQ}).value();
    const std::vector<size_t> nb = {kD * kKvHeads * size, kD * size};
    Tensor* k = View(ctx, k_cache, {kD, kKv, kKvHeads}, nb, 0).value();
    Tensor* v = View(ctx, v_cache, {kD, kKv, kKvHeads}, nb, 0).value();
    Tensor* out = FlashAttnExt(ctx, q, k, v, mask, 0.15f, 0.0f, 0.0f).value();
    Graph graph;
    ASSERT_TRUE(graph.Expand(out).ok());
    CpuDevice host({.name = "host", .n_threads = 1, .memory_limit = 0});
    std::vector<Tensor*> all(graph.leafs().begin(), graph.leafs().end());
    all.insert(all.end(), graph.nodes().begin(), graph.nodes().end());
    std::unique_ptr<Buffer> buffer =
        AllocTensors(host.buffer_type(), all).value();
    uint32_t seed = 1;
    for (Tensor* t : {q, k_cache, v_cache, mask}) {
      std::vector<char> bytes(t->NumBytes());
      RowFromFloat(t->type, Pattern(t->NumElements(), seed++).data(),
                   bytes.data(), t->NumElements());
      ASSERT_TRUE(testing::Write(*t, bytes.data()).ok());
    }
    ASSERT_GT(FlashAttnWorkSize(*out, 2), 0u);
    ASSERT_TRUE(ReferenceCompute(*out).ok());
    const std::vector<float> want = testing::Read(*out);
    for (SimdLevel level : SupportedSimdLevels()) {
      CpuDevice device({.name = "cpu",
                        .n_threads = 2,
                        .memory_limit = 0,
                        .max_simd = level});
      const std::vector<float> sevens(out->NumElements(), 7.0f);
      ASSERT_TRUE(testing::Write(*out, sevens.data()).ok());
      std::unique_ptr<Stream> stream = device.CreateStream().value();
      ASSERT_TRUE(stream->Compute(graph).ok());
      EXPECT_LT(testing::Nmse(testing::Read(*out), want), 1e-10)
          << TypeName(type) << " " << SimdLevelName(level);
    }
  }
}

// Keys and values of every type FLASH_ATTN_EXT reads, alike and mixed (a
// Q8_0 K beside an F16 V, as llama.cpp's -ctk q8_0 -ctv f16 keeps them):
// the kernel takes them on its own path (FlashAttnWorkSize is not 0; the
// device would otherwise fall back to the reference kernel) and agrees
// with the reference kernel at every SIMD level. Both dequantize the same
// bytes exactly (the kernel in its registers), so only float arithmetic
// differs. The 300 keys span two tiles (256 keys and 44).
TEST(CpuFlashAttnTest, EveryKvTypeRunsOnTheKernelAndMatchesReference) {
  // 768 or more outputs by 300 keys: enough work that two threads share it.
  constexpr int64_t kQ = 3, kKv = 300, kHeads = 4, kKvHeads = 2;
  const Type types[] = {Type::kF32,  Type::kF16,  Type::kBF16,
                        Type::kQ8_0, Type::kQ4_0, Type::kQ4_1,
                        Type::kQ5_0, Type::kQ5_1};
  for (int64_t d : {64, 128}) {
    for (Type kt : types) {
      for (Type vt : types) {
        const std::string what =
            absl::StrCat("d ", d, " k ", std::string(TypeName(kt)), " v ",
                         std::string(TypeName(vt)));
        Attention a(d, kQ, kKv, kHeads, kKvHeads, kt, vt, 0.125f, 0.0f, 0.0f);
        uint32_t seed = 1;
        for (Tensor* t : {a.q, a.k, a.v, a.mask}) {
          ASSERT_TRUE(
              Attention::Set(*t, Pattern(t->NumElements(), seed++)).ok())
              << what;
        }
        EXPECT_GT(FlashAttnWorkSize(*a.out, 2), 0u) << what;
        ASSERT_TRUE(ReferenceCompute(*a.out).ok()) << what;
        const std::vector<float> want = testing::Read(*a.out);
        for (SimdLevel level : SupportedSimdLevels()) {
          absl::StatusOr<std::vector<float>> got = a.ComputeAt(level, 2);
          ASSERT_TRUE(got.ok()) << what << " " << got.status();
          EXPECT_LT(testing::Nmse(*got, want), 1e-10)
              << what << " " << SimdLevelName(level);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera
