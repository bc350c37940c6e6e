// Single-op throughput of the CPU device at ggml's test-backend-ops perf
// shapes, each row against a limit measured in the same run:
//  - "read": a streaming read-reduce (bench/stream_read.h, the faster of
//    its two kinds) of the very bytes the op reads (the weights of MUL_MAT
//    n=1, K and V of attention decode), on the same threads, so the
//    roofline counts whether those bytes sit in cache or in memory (the
//    "x<copies> matrices" rows read 256 MiB or more of weights, more than
//    any cache holds);
//  - "copy": memcpy of the bytes an op touches (row ops), counted the same
//    way (a copy of S bytes touches 2S);
//  - "fma": the AVX-512 (else AVX2) FMA peak of the same threads, from a
//    register-only microbenchmark (compute-bound rows);
//  - "bf16": at the avx512bf16 level, the peak of vdpbf16ps (AVX-512 dot
//    products of BF16 pairs) on the same threads, from a register-only
//    microbenchmark: the limit of MUL_MAT bf16 rows with n >=
//    kMinTileCols, which that level computes so;
//  - "amx": at the amx level, the tile units' peak on the same threads
//    (BF16 FLOP/s for BF16 and F16 weights, int8 operations/s for Q8_0 and
//    Q4_0),
//    from a microbenchmark of tile products on tiles already loaded: the
//    limit of MUL_MAT rows with n >= kMinTileCols that the tile units
//    compute;
//  - "sgemm": OpenBLAS sgemm on the same shape, for comparison.
// Times are each case's fastest run. A "read" limit runs alternately with
// its op, call by call, so that both find the bytes in the same caches and
// memory at the same speed (which on a VM can change from one minute to
// the next). Every case is a graph computed through a CpuDevice stream.
// "ADD chain" is a graph of 100 dependent f32[16] ADDs and reports
// microseconds per node: the per-node overhead of the stream and its
// thread team.
//
//   bazel run -c opt //bench:ops -- [--threads=N]
//       [--simd=scalar|avx2|avx512|avx512bf16|amx]
//       [--case=SUBSTRING]

#include "graph/ops.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/host_pages.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_level.h"
#include "base/status_macros.h"
#include "bench/stream_read.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/type.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds of the fastest call of fn: one warm-up call, then calls until at
// least `min_seconds` and 5 calls have passed. The fastest call, not the
// mean, so that rows and their limits are compared at the least
// interference from other work on a shared machine.
//
// With a second function, the two alternate call by call (a after b) and
// the result is each one's fastest call.
template <typename FnA, typename FnB>
std::pair<double, double> TimeAlternating(FnA a, FnB b,
                                          double min_seconds = 0.5) {
  a();
  b();
  int calls = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  double best_a = std::numeric_limits<double>::infinity();
  double best_b = best_a;
  auto seconds = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  };
  do {
    const auto a_start = Clock::now();
    a();
    const auto b_start = Clock::now();
    b();
    const auto b_end = Clock::now();
    best_a = std::min(best_a, seconds(a_start, b_start));
    best_b = std::min(best_b, seconds(b_start, b_end));
    ++calls;
    elapsed = seconds(start, b_end);
  } while (elapsed < min_seconds || calls < 5);
  return {best_a, best_b};
}

template <typename Fn>
double TimePerCall(Fn fn, double min_seconds = 0.5) {
  return TimeAlternating(fn, [] {}, min_seconds).first;
}

// Deterministic values in [-1, 1).
void Fill(std::vector<float>& v, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1 << 23) - 1.0f;
  }
}

// Runs fn(t) on `threads` threads (t = 0..threads-1) and joins them.
template <typename Fn>
void OnThreads(int threads, Fn fn) {
  std::vector<std::thread> team;
  for (int t = 1; t < threads; ++t) team.emplace_back(fn, t);
  fn(0);
  for (std::thread& th : team) th.join();
}

// Bytes per second of memcpy (read plus written) of `bytes` on `threads`
// threads, each copying its share between buffers already touched.
double CopyBandwidth(size_t bytes, int threads) {
  // On the pages the device's buffers have (host_pages.h).
  const HostPages src_pages = AllocHostPages(bytes);
  const HostPages dst_pages = AllocHostPages(bytes);
  char* src = static_cast<char*>(src_pages.get());
  char* dst = static_cast<char*>(dst_pages.get());
  std::memset(src, 1, bytes);
  std::memset(dst, 2, bytes);
  const size_t part = bytes / threads;
  const double seconds = TimePerCall([&] {
    OnThreads(threads, [&](int t) {
      std::memcpy(dst + t * part, src + t * part, part);
    });
  });
  return 2.0 * static_cast<double>(part * threads) / seconds;
}

// A read-reduce of byte ranges (bench/stream_read.h) on `threads` threads,
// each summing its share of every range's whole words. Calls alternate the
// kinds of read, so that the fastest of several calls is the faster kind's.
class Read {
 public:
  struct Range {
    const void* data;
    size_t bytes;
  };

  Read(std::vector<Range> ranges, int threads)
      : ranges_(std::move(ranges)), threads_(threads) {}
  void operator()() {
    const bench::ReadKind kind =
        bench::kReadKinds[calls_++ % std::size(bench::kReadKinds)];
    OnThreads(threads_, [&](int t) {
      uint64_t sum = 0;
      for (const Range& r : ranges_) {
        const size_t words = r.bytes / sizeof(uint64_t);
        const size_t begin = words * t / threads_;
        const size_t end = words * (t + 1) / threads_;
        sum += bench::StreamSum(
            kind, static_cast<const uint64_t*>(r.data) + begin, end - begin);
      }
      sink_ += sum;
    });
  }
  // Bytes a call reads.
  double read() const {
    size_t bytes = 0;
    for (const Range& r : ranges_) {
      bytes += r.bytes / sizeof(uint64_t) * sizeof(uint64_t);
    }
    return static_cast<double>(bytes);
  }

 private:
  std::vector<Range> ranges_;
  int threads_;
  size_t calls_ = 0;
  std::atomic<uint64_t> sink_{0};
};

// Bytes per second of a Read of a buffer of `bytes` already touched, on
// the pages the device's buffers have.
double ReadBandwidth(size_t bytes, int threads) {
  const HostPages pages = AllocHostPages(bytes);
  std::memset(pages.get(), 3, bytes);
  Read read({{pages.get(), bytes}}, threads);
  return read.read() / TimePerCall([&] { read(); }, 0.3);
}

// `iters` rounds of 12 independent FMA chains, each chain its own
// variable so that it stays in a register (an array of accumulators can
// live in memory, and its store-to-load latency would set the rate).
template <typename Vec>
__attribute__((always_inline)) inline float FmaChains(int64_t iters) {
  Vec c0 = Vec{} + 0.0f, c1 = Vec{} + 1.0f, c2 = Vec{} + 2.0f,
      c3 = Vec{} + 3.0f, c4 = Vec{} + 4.0f, c5 = Vec{} + 5.0f,
      c6 = Vec{} + 6.0f, c7 = Vec{} + 7.0f, c8 = Vec{} + 8.0f,
      c9 = Vec{} + 9.0f, c10 = Vec{} + 10.0f, c11 = Vec{} + 11.0f;
  const Vec a = Vec{} + 0.999f;
  const Vec b = Vec{} + 1e-3f;
  for (int64_t i = 0; i < iters; ++i) {
    c0 = c0 * a + b;
    c1 = c1 * a + b;
    c2 = c2 * a + b;
    c3 = c3 * a + b;
    c4 = c4 * a + b;
    c5 = c5 * a + b;
    c6 = c6 * a + b;
    c7 = c7 * a + b;
    c8 = c8 * a + b;
    c9 = c9 * a + b;
    c10 = c10 * a + b;
    c11 = c11 * a + b;
  }
  const Vec sum = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
  return sum[0];
}

__attribute__((target("avx512f"))) float FmaAvx512(int64_t iters) {
  using F16x = float __attribute__((vector_size(64)));
  return FmaChains<F16x>(iters);
}

__attribute__((target("avx2,fma"))) float FmaAvx2(int64_t iters) {
  using F8x = float __attribute__((vector_size(32)));
  return FmaChains<F8x>(iters);
}

// Peak FLOP/s of FMAs on `threads` threads at the widest vector this CPU
// has (AVX-512 or AVX2; 0 without either).
double FmaPeak(int threads, std::string& which) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !__builtin_cpu_supports("fma")) return 0;
  which = avx512 ? "AVX-512" : "AVX2";
  constexpr int64_t kIters = 1 << 22;
  std::atomic<float> sink{0};
  const double seconds = TimePerCall(
      [&] {
        OnThreads(threads, [&](int) {
          sink = sink + (avx512 ? FmaAvx512(kIters) : FmaAvx2(kIters));
        });
      },
      0.3);
  const double lanes = avx512 ? 16 : 8;
  return 2.0 * lanes * 12 * kIters * threads / seconds;
}

// `iters` rounds of 12 independent chains of vdpbf16ps, each chain its own
// variable (as FmaChains).
__attribute__((target("avx512f,avx512bf16"))) float Dpbf16Chains(
    int64_t iters) {
  __m512 c0 = _mm512_set1_ps(0.0f), c1 = _mm512_set1_ps(1.0f),
         c2 = _mm512_set1_ps(2.0f), c3 = _mm512_set1_ps(3.0f),
         c4 = _mm512_set1_ps(4.0f), c5 = _mm512_set1_ps(5.0f),
         c6 = _mm512_set1_ps(6.0f), c7 = _mm512_set1_ps(7.0f),
         c8 = _mm512_set1_ps(8.0f), c9 = _mm512_set1_ps(9.0f),
         c10 = _mm512_set1_ps(10.0f), c11 = _mm512_set1_ps(11.0f);
  // 0.999 and 1e-3 as BF16 pairs.
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80));
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3A83));
  for (int64_t i = 0; i < iters; ++i) {
    c0 = _mm512_dpbf16_ps(c0, a, b);
    c1 = _mm512_dpbf16_ps(c1, a, b);
    c2 = _mm512_dpbf16_ps(c2, a, b);
    c3 = _mm512_dpbf16_ps(c3, a, b);
    c4 = _mm512_dpbf16_ps(c4, a, b);
    c5 = _mm512_dpbf16_ps(c5, a, b);
    c6 = _mm512_dpbf16_ps(c6, a, b);
    c7 = _mm512_dpbf16_ps(c7, a, b);
    c8 = _mm512_dpbf16_ps(c8, a, b);
    c9 = _mm512_dpbf16_ps(c9, a, b);
    c10 = _mm512_dpbf16_ps(c10, a, b);
    c11 = _mm512_dpbf16_ps(c11, a, b);
  }
  const __m512 sum =
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), c2),
                                  _mm512_add_ps(_mm512_add_ps(c3, c4), c5)),
                    _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c6, c7), c8),
                                  _mm512_add_ps(_mm512_add_ps(c9, c10), c11)));
  return _mm512_cvtss_f32(sum);
}

// Peak FLOP/s of vdpbf16ps on `threads` threads (16 lanes, each two
// products and their sums).
double Dpbf16Peak(int threads) {
  constexpr int64_t kIters = 1 << 22;
  std::atomic<float> sink{0};
  const double seconds = TimePerCall(
      [&] {
        OnThreads(threads, [&](int) { sink = sink + Dpbf16Chains(kIters); });
      },
      0.3);
  return 4.0 * 16 * 12 * kIters * threads / seconds;
}

// Peak operations/s of the tile units on `threads` threads: four products
// 16 x 16 x 64 (int8; 32 BF16 pairs) per round into four result tiles, from
// four operand tiles already loaded. Each thread configures its own tiles;
// the process has the tile permission (DetectSimdLevel asked it).
struct AmxPeak {
  double int8_ops = 0;
  double bf16_flops = 0;
};

struct alignas(64) PeakTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

__attribute__((target("amx-tile,amx-int8,amx-bf16"))) void TileRounds(
    int64_t rounds, bool bf16) {
  const PeakTileConfig config;
  alignas(64) static const char operand[1024] = {};
  _tile_loadconfig(&config);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < rounds; ++i) {
    if (bf16) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    } else {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
  }
  alignas(64) char result[1024];
  _tile_stored(0, result, 64);
  _tile_release();
}

AmxPeak MeasureAmxPeak(int threads) {
  constexpr int64_t kRounds = 1 << 21;
  AmxPeak peak;
  for (bool bf16 : {false, true}) {
    const double seconds = TimePerCall(
        [&] { OnThreads(threads, [&](int) { TileRounds(kRounds, bf16); }); },
        0.3);
    // 16 x 16 results of 64 int8 (32 BF16) products and sums, 4 a round.
    const double ops = 4.0 * 16 * 16 * (bf16 ? 32 : 64) * 2 * kRounds * threads;
    (bf16 ? peak.bf16_flops : peak.int8_ops) = ops / seconds;
  }
  return peak;
}

// FLOP/s of OpenBLAS sgemm (its own `threads` threads) for dst (n x m) =
// src1 (n x k) * w (m x k)^T.
double SgemmFlops(int64_t m, int64_t n, int64_t k, int threads) {
  std::vector<float> w(m * k), x(n * k), y(m * n);
  Fill(w, 1);
  Fill(x, 2);
  openblas_set_num_threads(threads);
  const double seconds = TimePerCall([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0f,
                x.data(), k, w.data(), k, 0.0f, y.data(), m);
  });
  return 2.0 * m * n * k / seconds;
}

// A graph of one op with its inputs in one device buffer.
struct OneOp {
  Context ctx;
  Graph graph;
  std::unique_ptr<Buffer> buffer;
};

// The bytes Prepare fills a leaf with: floats in [-1, 1) (from `seed`,
// which it advances) converted to the leaf's type, or 0..n-1 for I32.
std::vector<char> LeafBytes(const Tensor& leaf, uint32_t& seed) {
  const int64_t n = leaf.NumElements();
  std::vector<char> bytes(leaf.NumBytes());
  if (leaf.type == Type::kI32) {
    for (int64_t i = 0; i < n; ++i) {
      const int32_t v = static_cast<int32_t>(i);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  } else {
    std::vector<float> values(n);
    Fill(values, seed++);
    RowFromFloat(leaf.type, values.data(), bytes.data(), n);
  }
  return bytes;
}

// Builds `build(ctx)`'s graph, allocates every tensor on `device` and fills
// each leaf (LeafBytes). With `repeat` set, a leaf of the type and size of
// one filled before gets that one's bytes (copies of one matrix, converted
// once).
template <typename Build>
absl::Status Prepare(Device& device, Build build, OneOp& op,
                     bool repeat = false) {
  TESSERA_ASSIGN_OR_RETURN(Tensor * out, build(op.ctx));
  TESSERA_RETURN_IF_ERROR(op.graph.Expand(out));
  std::vector<Tensor*> all(op.graph.leafs().begin(), op.graph.leafs().end());
  all.insert(all.end(), op.graph.nodes().begin(), op.graph.nodes().end());
  TESSERA_ASSIGN_OR_RETURN(op.buffer, AllocTensors(device.buffer_type(), all));
  uint32_t seed = 1;
  std::vector<std::pair<Type, std::vector<char>>> kept;  // with `repeat`
  for (Tensor* leaf : op.graph.leafs()) {
    auto same = std::find_if(kept.begin(), kept.end(), [&](const auto& k) {
      return k.first == leaf->type && k.second.size() == leaf->NumBytes();
    });
    std::vector<char> made;
    if (same == kept.end()) made = LeafBytes(*leaf, seed);
    const std::vector<char>& bytes = same == kept.end() ? made : same->second;
    TESSERA_RETURN_IF_ERROR(
        leaf->buffer->SetTensor(*leaf, bytes.data(), 0, bytes.size()));
    if (repeat && same == kept.end()) {
      kept.emplace_back(leaf->type, std::move(made));
    }
  }
  return absl::OkStatus();
}

// The fastest run of op's graph and, alternating with it, of `limit`.
template <typename Limit>
absl::StatusOr<std::pair<double, double>> TimeGraphAgainst(Stream& stream,
                                                           const OneOp& op,
                                                           Limit limit) {
  absl::Status status;
  const std::pair<double, double> seconds = TimeAlternating(
      [&] {
        if (!status.ok()) return;
        status = stream.ComputeAsync(op.graph);
        if (status.ok()) status = stream.Synchronize();
      },
      limit);
  TESSERA_RETURN_IF_ERROR(status);
  return seconds;
}

absl::StatusOr<double> TimeGraph(Stream& stream, const OneOp& op) {
  TESSERA_ASSIGN_OR_RETURN(auto seconds, TimeGraphAgainst(stream, op, [] {}));
  return seconds.first;
}

// The fastest run of op's graph, and the bytes per second of a Read of
// `ranges` (the bytes the op reads) run alternately with it.
struct ReadBound {
  double seconds;
  double read_bytes_per_s;
};
absl::StatusOr<ReadBound> TimeAgainstRead(Stream& stream, const OneOp& op,
                                          std::vector<Read::Range> ranges,
                                          int threads) {
  Read read(std::move(ranges), threads);
  TESSERA_ASSIGN_OR_RETURN(auto seconds,
                           TimeGraphAgainst(stream, op, std::ref(read)));
  return ReadBound{seconds.first, read.read() / seconds.second};
}

struct Limits {
  int threads;
  double fma_flops;
  double bf16_flops = 0;  // vdpbf16ps, at the avx512bf16 level only
  AmxPeak amx;  // zero below the amx level
  std::vector<std::pair<int64_t, double>> sgemm_flops;  // by n
  double Sgemm(int64_t n) const {
    for (const auto& [cols, flops] : sgemm_flops) {
      if (cols == n) return flops;
    }
    return 0;
  }
};

void PrintHeader() {
  absl::PrintF("%-34s %11s %8s %8s %8s %6s %8s\n", "case", "us/run", "GFLOPS",
               "GB/s", "x limit", "limit", "x sgemm");
}

// One table row; a ratio or rate of 0 prints as "-".
void PrintRow(std::string_view name, double seconds, double gflops, double gbps,
              double vs_limit, std::string_view limit, double vs_sgemm) {
  auto cell = [](double v, int precision) {
    return v > 0 ? absl::StrFormat("%.*f", precision, v) : std::string("-");
  };
  absl::PrintF("%-34s %11.1f %8s %8s %8s %6s %8s\n", name, seconds * 1e6,
               cell(gflops, 1), cell(gbps, 2), cell(vs_limit, 2), limit,
               cell(vs_sgemm, 2));
}

bool Selected(std::string_view name, std::string_view only) {
  return name.find(only) != std::string_view::npos;
}

// ggml's MUL_MAT shape: m x k weights.
constexpr int64_t kMulMatM = 4096;
constexpr int64_t kMulMatK = 14336;

// MUL_MAT of `copies` matrices of ggml's shape (converted once) by the same
// n columns, the products summed. With copies > 1 the row reads its n=1
// weights from memory, as a decode step does: the one-matrix row of a type
// of 64 MiB or less finds them partly in the last-level cache.
absl::Status MulMatCase(CpuDevice& device, Stream& stream, const Limits& lim,
                        std::string_view only, Type type, int64_t n,
                        int64_t copies = 1) {
  const std::string name =
      copies == 1
          ? absl::StrFormat("MUL_MAT %s n=%d", TypeName(type), n)
          : absl::StrFormat("MUL_MAT %s n=%d x%d matrices", TypeName(type), n,
                            copies);
  if (!Selected(name, only)) return absl::OkStatus();
  OneOp op;
  std::vector<const Tensor*> weights;
  TESSERA_RETURN_IF_ERROR(Prepare(
      device,
      [&](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * x,
                                 ctx.NewTensor(Type::kF32, {kMulMatK, n}));
        Tensor* sum = nullptr;
        for (int64_t i = 0; i < copies; ++i) {
          TESSERA_ASSIGN_OR_RETURN(Tensor * w,
                                   ctx.NewTensor(type, {kMulMatK, kMulMatM}));
          weights.push_back(w);
          TESSERA_ASSIGN_OR_RETURN(Tensor * y, MulMat(ctx, w, x));
          if (sum == nullptr) {
            sum = y;
          } else {
            TESSERA_ASSIGN_OR_RETURN(sum, Add(ctx, sum, y));
          }
        }
        return sum;
      },
      op, /*repeat=*/copies > 1));
  std::vector<Read::Range> ranges;
  size_t bytes = 0;
  for (const Tensor* w : weights) {
    ranges.push_back({w->data, w->NumBytes()});
    bytes += w->NumBytes();
  }
  // Against OpenBLAS at the one-matrix shape it was timed at (0: none).
  auto vs_sgemm = [&](double flops) {
    return copies == 1 ? flops / lim.Sgemm(n) : 0;
  };
  if (n == 1) {
    // Memory-bound: the weights read once.
    TESSERA_ASSIGN_OR_RETURN(
        ReadBound t, TimeAgainstRead(stream, op, std::move(ranges), lim.threads));
    const double flops = 2.0 * kMulMatM * kMulMatK * copies / t.seconds;
    const double bytes_per_s = bytes / t.seconds;
    PrintRow(name, t.seconds, flops / 1e9, bytes_per_s / 1e9,
             bytes_per_s / t.read_bytes_per_s, "read", vs_sgemm(flops));
    return absl::OkStatus();
  }
  TESSERA_ASSIGN_OR_RETURN(double seconds, TimeGraph(stream, op));
  const double flops = 2.0 * kMulMatM * n * kMulMatK * copies / seconds;
  const double bytes_per_s = bytes / seconds;
  if (lim.amx.int8_ops > 0 && n >= kMinTileCols &&
             (type == Type::kBF16 || type == Type::kF16 ||
              type == Type::kQ8_0 || type == Type::kQ4_0)) {
    const double peak = type == Type::kBF16 || type == Type::kF16
                            ? lim.amx.bf16_flops
                            : lim.amx.int8_ops;
    PrintRow(name, seconds, flops / 1e9, bytes_per_s / 1e9, flops / peak,
             "amx", vs_sgemm(flops));
  } else if (lim.bf16_flops > 0 && n >= kMinTileCols && type == Type::kBF16) {
    PrintRow(name, seconds, flops / 1e9, bytes_per_s / 1e9,
             flops / lim.bf16_flops, "bf16", vs_sgemm(flops));
  } else {
    PrintRow(name, seconds, flops / 1e9, bytes_per_s / 1e9,
             flops / lim.fma_flops, "fma", vs_sgemm(flops));
  }
  return absl::OkStatus();
}

// A memory-bound op: bytes touched (every leaf and node once) against a
// copy of the same bytes.
template <typename Build>
absl::Status MemoryCase(CpuDevice& device, Stream& stream, const Limits& lim,
                        std::string_view only, std::string_view name,
                        Build build) {
  if (!Selected(name, only)) return absl::OkStatus();
  OneOp op;
  TESSERA_RETURN_IF_ERROR(Prepare(device, build, op));
  size_t bytes = 0;
  for (Tensor* t : op.graph.leafs()) bytes += t->NumBytes();
  for (Tensor* t : op.graph.nodes()) bytes += t->NumBytes();
  TESSERA_ASSIGN_OR_RETURN(double seconds, TimeGraph(stream, op));
  const double bytes_per_s = bytes / seconds;
  const double copy = CopyBandwidth(bytes / 2, lim.threads);
  PrintRow(name, seconds, 0, bytes_per_s / 1e9, bytes_per_s / copy, "copy", 0);
  return absl::OkStatus();
}

// FLASH_ATTN_EXT with ggml's shapes: 32 query heads over 8 K/V heads of
// 128 in `kv_type`, kKv cached positions (ggml's 4096, whose F16 K and V
// fit this machine's last-level cache, or more), F16 mask. Decode (1
// query) is bound by reading K and V; prompt (512 queries) by the FMAs.
absl::Status FlashAttnCase(CpuDevice& device, Stream& stream, const Limits& lim,
                           std::string_view only, Type kv_type, int64_t n_q,
                           int64_t kKv = 4096) {
  const std::string name =
      absl::StrFormat("FLASH_ATTN_EXT %s q=%d kv=%d %s", TypeName(kv_type),
                      n_q, kKv, n_q == 1 ? "decode" : "prompt");
  if (!Selected(name, only)) return absl::OkStatus();
  constexpr int64_t kD = 128, kHeads = 32, kKvHeads = 8;
  OneOp op;
  Tensor* k = nullptr;
  Tensor* v = nullptr;
  TESSERA_RETURN_IF_ERROR(Prepare(
      device,
      [&](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * q,
                                 ctx.NewTensor(Type::kF32, {kD, n_q, kHeads}));
        TESSERA_ASSIGN_OR_RETURN(k,
                                 ctx.NewTensor(kv_type, {kD, kKv, kKvHeads}));
        TESSERA_ASSIGN_OR_RETURN(v,
                                 ctx.NewTensor(kv_type, {kD, kKv, kKvHeads}));
        TESSERA_ASSIGN_OR_RETURN(Tensor * mask,
                                 ctx.NewTensor(Type::kF16, {kKv, n_q}));
        return FlashAttnExt(ctx, q, k, v, mask, 0.088f, 0.0f, 0.0f);
      },
      op));
  const size_t kv_bytes = k->NumBytes() + v->NumBytes();
  if (n_q == 1) {
    TESSERA_ASSIGN_OR_RETURN(
        ReadBound t,
        TimeAgainstRead(stream, op,
                        {{k->data, k->NumBytes()}, {v->data, v->NumBytes()}},
                        lim.threads));
    const double flops = 4.0 * kD * kKv * kHeads / t.seconds;
    const double bytes_per_s = kv_bytes / t.seconds;
    PrintRow(name, t.seconds, flops / 1e9, bytes_per_s / 1e9,
             bytes_per_s / t.read_bytes_per_s, "read", 0);
    return absl::OkStatus();
  }
  TESSERA_ASSIGN_OR_RETURN(double seconds, TimeGraph(stream, op));
  const double flops = 4.0 * kD * kKv * kHeads * n_q / seconds;
  PrintRow(name, seconds, flops / 1e9, kv_bytes / seconds / 1e9,
           flops / lim.fma_flops, "fma", 0);
  return absl::OkStatus();
}

// FLASH_ATTN_EXT decode over a KV cache as model/llama.cc (and llama.cpp)
// keep it: one F16 row of all 8 K/V heads per position, each head a view
// whose rows lie a whole cache row apart, as in a 1B LLaMA (32 query
// heads of 64). `used` positions of the kKv are in use and the mask sets
// the rest to -inf, as a decode step early in a sequence sees it. Bound by
// reading K and V of the positions in use.
absl::Status FlashAttnCacheCase(CpuDevice& device, Stream& stream,
                                const Limits& lim, std::string_view only,
                                int64_t used) {
  constexpr int64_t kD = 64, kHeads = 32, kKvHeads = 8, kKv = 4096;
  const std::string name =
      used == kKv
          ? absl::StrFormat("FLASH_ATTN_EXT f16 d=%d kv=%d cache decode", kD,
                            kKv)
          : absl::StrFormat("FLASH_ATTN_EXT f16 d=%d kv=%d/%d cache decode",
                            kD, used, kKv);
  if (!Selected(name, only)) return absl::OkStatus();
  OneOp op;
  Tensor* caches[2];  // K, V
  Tensor* mask = nullptr;
  TESSERA_RETURN_IF_ERROR(Prepare(
      device,
      [&](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * q,
                                 ctx.NewTensor(Type::kF32, {kD, 1, kHeads}));
        Tensor* heads[2];
        for (int i = 0; i < 2; ++i) {
          Tensor*& h = heads[i];
          Tensor*& cache = caches[i];
          TESSERA_ASSIGN_OR_RETURN(
              cache, ctx.NewTensor(Type::kF16, {kD * kKvHeads, kKv}));
          TESSERA_ASSIGN_OR_RETURN(
              h, View(ctx, cache, {kD, kKvHeads, kKv},
                      {kD * sizeof(uint16_t), cache->nb[1]}, 0));
          TESSERA_ASSIGN_OR_RETURN(h, Permute(ctx, h, 0, 2, 1, 3));
        }
        TESSERA_ASSIGN_OR_RETURN(mask, ctx.NewTensor(Type::kF16, {kKv, 1}));
        return FlashAttnExt(ctx, q, heads[0], heads[1], mask, 0.125f, 0.0f,
                            0.0f);
      },
      op));
  if (used < kKv) {
    std::vector<float> bias(kKv, 0.0f);
    std::fill(bias.begin() + used, bias.end(),
              -std::numeric_limits<float>::infinity());
    std::vector<char> bytes(mask->NumBytes());
    RowFromFloat(Type::kF16, bias.data(), bytes.data(), kKv);
    TESSERA_RETURN_IF_ERROR(
        mask->buffer->SetTensor(*mask, bytes.data(), 0, bytes.size()));
  }
  // The positions in use: the first `used` rows of each cache.
  const size_t used_bytes = used * caches[0]->nb[1];
  TESSERA_ASSIGN_OR_RETURN(
      ReadBound t,
      TimeAgainstRead(
          stream, op,
          {{caches[0]->data, used_bytes}, {caches[1]->data, used_bytes}},
          lim.threads));
  const double flops = 4.0 * kD * used * kHeads / t.seconds;
  const double bytes_per_s = 2.0 * used_bytes / t.seconds;
  PrintRow(name, t.seconds, flops / 1e9, bytes_per_s / 1e9,
           bytes_per_s / t.read_bytes_per_s, "read", 0);
  return absl::OkStatus();
}

// 100 dependent ADDs of f32[16]: microseconds per node.
absl::Status AddChainCase(CpuDevice& device, Stream& stream,
                          std::string_view only) {
  constexpr int kNodes = 100;
  const std::string name = "ADD chain f32[16] x100 (us/node)";
  if (!Selected(name, only)) return absl::OkStatus();
  OneOp op;
  TESSERA_RETURN_IF_ERROR(Prepare(
      device,
      [&](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * x, ctx.NewTensor(Type::kF32, {16}));
        TESSERA_ASSIGN_OR_RETURN(Tensor * b, ctx.NewTensor(Type::kF32, {16}));
        for (int i = 0; i < kNodes; ++i) {
          TESSERA_ASSIGN_OR_RETURN(x, Add(ctx, x, b));
        }
        return x;
      },
      op));
  TESSERA_ASSIGN_OR_RETURN(double seconds, TimeGraph(stream, op));
  absl::PrintF("%-34s %11.1f %8s %8s %8.2f %6s %8s\n", name, seconds * 1e6, "-",
               "-", seconds * 1e6 / kNodes, "us", "-");
  return absl::OkStatus();
}

absl::Status Main(int threads, SimdLevel simd, std::string_view only) {
  CpuDevice device(
      CpuDeviceOptions{.name = "cpu0", .n_threads = threads, .max_simd = simd});
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                           device.CreateStream());
  absl::PrintF("%s; limits and OpenBLAS sgemm on %d threads\n",
               device.Props().description, threads);

  Limits lim;
  lim.threads = threads;
  std::string fma_kind = "none";
  lim.fma_flops = FmaPeak(threads, fma_kind);
  for (int64_t n : {1, 8, 512}) {
    lim.sgemm_flops.push_back({n, SgemmFlops(4096, n, 14336, threads)});
  }
  absl::PrintF("FMA peak (%s): %.1f GFLOPS\n", fma_kind, lim.fma_flops / 1e9);
  if (device.simd_level() == SimdLevel::kAvx512Bf16) {
    lim.bf16_flops = Dpbf16Peak(threads);
    absl::PrintF("BF16 pair peak (vdpbf16ps): %.1f GFLOPS\n",
                 lim.bf16_flops / 1e9);
  }
  if (device.simd_level() >= SimdLevel::kAmx) {
    lim.amx = MeasureAmxPeak(threads);
    absl::PrintF("AMX peak: int8 %.1f TOPS, BF16 %.1f TFLOPS\n",
                 lim.amx.int8_ops / 1e12, lim.amx.bf16_flops / 1e12);
  }
  absl::PrintF("read-reduce of 256 MiB: %.2f GB/s; copy: %.2f GB/s\n",
               ReadBandwidth(size_t{256} << 20, threads) / 1e9,
               CopyBandwidth(size_t{256} << 20, threads) / 1e9);
  for (const auto& [n, flops] : lim.sgemm_flops) {
    absl::PrintF("sgemm m=4096 k=14336 n=%d: %.1f GFLOPS\n", n, flops / 1e9);
  }
  PrintHeader();
  for (Type type : {Type::kF32, Type::kF16, Type::kBF16, Type::kQ8_0,
                    Type::kQ4_0, Type::kQ4_1, Type::kQ5_0, Type::kQ5_1,
                    Type::kQ2_K, Type::kQ3_K, Type::kQ4_K, Type::kQ5_K,
                    Type::kQ6_K}) {
    for (int64_t n : {1, 8, 512}) {
      TESSERA_RETURN_IF_ERROR(MulMatCase(device, *stream, lim, only, type, n));
    }
    // n=1 again from memory, where one matrix is 64 MiB or less: copies
    // of it make 256 MiB or more, more than any cache holds.
    constexpr size_t kInMemory = size_t{256} << 20;
    const size_t matrix = RowSize(type, kMulMatK) * kMulMatM;
    if (matrix <= kInMemory / 4) {
      TESSERA_RETURN_IF_ERROR(MulMatCase(device, *stream, lim, only, type, 1,
                                         (kInMemory + matrix - 1) / matrix));
    }
  }
  TESSERA_RETURN_IF_ERROR(
      MemoryCase(device, *stream, lim, only, "ADD f32 [4096,4096]",
                 [](Context& ctx) -> absl::StatusOr<Tensor*> {
                   TESSERA_ASSIGN_OR_RETURN(
                       Tensor * a, ctx.NewTensor(Type::kF32, {4096, 4096}));
                   TESSERA_ASSIGN_OR_RETURN(
                       Tensor * b, ctx.NewTensor(Type::kF32, {4096, 4096}));
                   return Add(ctx, a, b);
                 }));
  TESSERA_RETURN_IF_ERROR(
      MemoryCase(device, *stream, lim, only, "RMS_NORM f32 [4096,512]",
                 [](Context& ctx) -> absl::StatusOr<Tensor*> {
                   TESSERA_ASSIGN_OR_RETURN(
                       Tensor * a, ctx.NewTensor(Type::kF32, {4096, 512}));
                   return RmsNorm(ctx, a, 1e-5f);
                 }));
  TESSERA_RETURN_IF_ERROR(
      MemoryCase(device, *stream, lim, only, "SOFT_MAX f32 [4096,512]",
                 [](Context& ctx) -> absl::StatusOr<Tensor*> {
                   TESSERA_ASSIGN_OR_RETURN(
                       Tensor * a, ctx.NewTensor(Type::kF32, {4096, 512}));
                   return SoftMax(ctx, a, nullptr, 1.0f, 0.0f);
                 }));
  // SwiGLU of a 512-token micro-batch of an FFN 8192 wide.
  TESSERA_RETURN_IF_ERROR(
      MemoryCase(device, *stream, lim, only, "GLU swiglu f32 [8192,512]",
                 [](Context& ctx) -> absl::StatusOr<Tensor*> {
                   TESSERA_ASSIGN_OR_RETURN(
                       Tensor * a, ctx.NewTensor(Type::kF32, {8192, 512}));
                   TESSERA_ASSIGN_OR_RETURN(
                       Tensor * b, ctx.NewTensor(Type::kF32, {8192, 512}));
                   return Glu(ctx, a, b, GluOp::kSwiGlu);
                 }));
  TESSERA_RETURN_IF_ERROR(
      MemoryCase(device, *stream, lim, only, "ROPE f32 [128,32,512]",
                 [](Context& ctx) -> absl::StatusOr<Tensor*> {
                   TESSERA_ASSIGN_OR_RETURN(
                       Tensor * a, ctx.NewTensor(Type::kF32, {128, 32, 512}));
                   TESSERA_ASSIGN_OR_RETURN(Tensor * pos,
                                            ctx.NewTensor(Type::kI32, {512}));
                   RopeParams params;
                   params.n_dims = 128;
                   params.n_ctx_orig = 4096;
                   return Rope(ctx, a, pos, params);
                 }));
  for (Type type : {Type::kF16, Type::kQ8_0, Type::kQ4_0, Type::kQ4_1,
                    Type::kQ5_0, Type::kQ5_1}) {
    TESSERA_RETURN_IF_ERROR(
        FlashAttnCase(device, *stream, lim, only, type, /*n_q=*/1));
  }
  TESSERA_RETURN_IF_ERROR(FlashAttnCase(device, *stream, lim, only, Type::kF16,
                                        /*n_q=*/1, /*kKv=*/16384));
  for (int64_t used : {4096, 512}) {
    TESSERA_RETURN_IF_ERROR(
        FlashAttnCacheCase(device, *stream, lim, only, used));
  }
  TESSERA_RETURN_IF_ERROR(
      FlashAttnCase(device, *stream, lim, only, Type::kF16, /*n_q=*/512));
  // Every row of the table gathered once (the indices are 0..511), so the
  // bytes touched are the table's and the result's.
  for (Type type : {Type::kF16, Type::kQ8_0, Type::kQ4_0}) {
    TESSERA_RETURN_IF_ERROR(MemoryCase(
        device, *stream, lim, only,
        absl::StrFormat("GET_ROWS %s [4096,512] x512", TypeName(type)),
        [type](Context& ctx) -> absl::StatusOr<Tensor*> {
          TESSERA_ASSIGN_OR_RETURN(Tensor * table,
                                   ctx.NewTensor(type, {4096, 512}));
          TESSERA_ASSIGN_OR_RETURN(Tensor * idx,
                                   ctx.NewTensor(Type::kI32, {512}));
          return GetRows(ctx, table, idx);
        }));
  }
  TESSERA_RETURN_IF_ERROR(AddChainCase(device, *stream, only));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  int threads = 2;
  tessera::SimdLevel simd = tessera::DetectSimdLevel();
  std::string only;  // run only the cases whose name contains this
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("--threads=")) {
      if (!absl::SimpleAtoi(absl::string_view(arg).substr(10), &threads) ||
          threads < 1) {
        absl::FPrintF(stderr, "bad %s: want --threads=N, N >= 1\n", arg);
        return 2;
      }
    } else if (arg.starts_with("--simd=")) {
      absl::StatusOr<tessera::SimdLevel> level =
          tessera::ParseSimdLevel(std::string_view(arg).substr(7));
      if (!level.ok()) {
        absl::FPrintF(stderr, "%s\n", level.status().ToString());
        return 2;
      }
      simd = *level;
    } else if (arg.starts_with("--case=")) {
      only = arg.substr(7);
    } else {
      absl::FPrintF(stderr,
                    "usage: ops [--threads=N] "
                    "[--simd=scalar|avx2|avx512|avx512bf16|amx] "
                    "[--case=SUBSTRING]\n");
      return 2;
    }
  }
  const absl::Status status = tessera::Main(threads, simd, only);
  if (!status.ok()) {
    absl::FPrintF(stderr, "%s\n", status.ToString());
    return 1;
  }
  return 0;
}
