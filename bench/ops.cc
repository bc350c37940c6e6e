// Single-op throughput of the CPU device against the limits measured in the
// same run: OpenBLAS sgemm on the same shape (MUL_MAT) and memcpy bandwidth
// (memory-bound ops, and the weight bytes of MUL_MAT with one column).
// Every case is a graph of one op computed through a CpuDevice stream.
//
//   bazel run -c opt //bench:ops -- [--threads=N] [--simd=scalar|avx2|avx512]
//                                   [--case=SUBSTRING]
//
// Bandwidths count bytes touched, read plus written: memcpy of S bytes
// touches 2S; an op touches its inputs and its output once; MUL_MAT with one
// column counts its weight bytes.

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
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
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/simd_level.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "base/status_macros.h"
#include "backend/alloc/tensor_allocator.h"
#include "graph/type.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call of fn: one warm-up call, then calls until at least
// `min_seconds` and 3 calls have passed.
template <typename Fn>
double TimePerCall(Fn fn, double min_seconds = 0.5) {
  fn();
  int calls = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < min_seconds || calls < 3);
  return elapsed / calls;
}

// Deterministic values in [-1, 1).
void Fill(std::vector<float>& v, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1 << 23) - 1.0f;
  }
}

// Bytes per second of memcpy (read plus written) on `threads` threads, each
// copying its share of 256 MiB between buffers already touched.
double MemcpyBandwidth(int threads) {
  constexpr size_t kBytes = size_t{256} << 20;
  std::vector<char> src(kBytes, 1);
  std::vector<char> dst(kBytes, 2);
  const size_t part = kBytes / threads;
  const double seconds = TimePerCall([&] {
    std::vector<std::thread> team;
    for (int t = 0; t < threads; ++t) {
      team.emplace_back([&, t] {
        std::memcpy(dst.data() + t * part, src.data() + t * part, part);
      });
    }
    for (std::thread& th : team) th.join();
  });
  return 2.0 * static_cast<double>(part * threads) / seconds;
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

// Builds `build(ctx)`'s graph, allocates every tensor on `device` and fills
// each leaf: floats in [-1, 1) converted to its type, I32 leafs with 0..n-1.
template <typename Build>
absl::Status Prepare(Device& device, Build build, OneOp& op) {
  TESSERA_ASSIGN_OR_RETURN(Tensor * out, build(op.ctx));
  TESSERA_RETURN_IF_ERROR(op.graph.Expand(out));
  std::vector<Tensor*> all(op.graph.leafs().begin(), op.graph.leafs().end());
  all.insert(all.end(), op.graph.nodes().begin(), op.graph.nodes().end());
  TESSERA_ASSIGN_OR_RETURN(op.buffer,
                           AllocTensors(device.buffer_type(), all));
  uint32_t seed = 1;
  for (Tensor* leaf : op.graph.leafs()) {
    const int64_t n = leaf->NumElements();
    std::vector<char> bytes(leaf->NumBytes());
    if (leaf->type == Type::kI32) {
      for (int64_t i = 0; i < n; ++i) {
        const int32_t v = static_cast<int32_t>(i);
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      }
    } else {
      std::vector<float> values(n);
      Fill(values, seed++);
      RowFromFloat(leaf->type, values.data(), bytes.data(), n);
    }
    TESSERA_RETURN_IF_ERROR(
        leaf->buffer->SetTensor(*leaf, bytes.data(), 0, bytes.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> TimeGraph(Stream& stream, const OneOp& op) {
  absl::Status status;
  const double seconds = TimePerCall([&] {
    if (!status.ok()) return;
    status = stream.ComputeAsync(op.graph);
    if (status.ok()) status = stream.Synchronize();
  });
  TESSERA_RETURN_IF_ERROR(status);
  return seconds;
}

struct Limits {
  double memcpy_bytes_per_s;
  std::vector<std::pair<int64_t, double>> sgemm_flops;  // by n
  double Sgemm(int64_t n) const {
    for (const auto& [cols, flops] : sgemm_flops) {
      if (cols == n) return flops;
    }
    return 0;
  }
};

void PrintHeader() {
  absl::PrintF("%-28s %12s %9s %9s %9s %9s\n", "case", "us/run", "GFLOPS",
               "x sgemm", "GB/s", "x memcpy");
}

// One table row; a ratio or rate of 0 prints as "-".
void PrintRow(std::string_view name, double seconds, double gflops,
              double vs_sgemm, double gbps, double vs_memcpy) {
  auto cell = [](double v, int precision) {
    return v > 0 ? absl::StrFormat("%.*f", precision, v) : std::string("-");
  };
  absl::PrintF("%-28s %12.1f %9s %9s %9s %9s\n", name, seconds * 1e6,
               cell(gflops, 1), cell(vs_sgemm, 2), cell(gbps, 2),
               cell(vs_memcpy, 2));
}

absl::Status MulMatCase(CpuDevice& device, Stream& stream, const Limits& lim,
                        std::string_view only, Type type, int64_t n) {
  const std::string name =
      absl::StrFormat("MUL_MAT %s n=%d", TypeName(type), n);
  if (name.find(only) == std::string::npos) return absl::OkStatus();
  constexpr int64_t kM = 4096;
  constexpr int64_t kK = 14336;
  OneOp op;
  Tensor* weights = nullptr;
  TESSERA_RETURN_IF_ERROR(Prepare(
      device,
      [&](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(weights, ctx.NewTensor(type, {kK, kM}));
        TESSERA_ASSIGN_OR_RETURN(Tensor * x,
                                 ctx.NewTensor(Type::kF32, {kK, n}));
        return MulMat(ctx, weights, x);
      },
      op));
  TESSERA_ASSIGN_OR_RETURN(double seconds, TimeGraph(stream, op));
  const double flops = 2.0 * kM * n * kK / seconds;
  const double sgemm = lim.Sgemm(n);
  double gbps = 0;
  double vs_memcpy = 0;
  if (n == 1) {
    const double bytes_per_s = weights->NumBytes() / seconds;
    gbps = bytes_per_s / 1e9;
    vs_memcpy = bytes_per_s / lim.memcpy_bytes_per_s;
  }
  PrintRow(name, seconds,
           flops / 1e9, flops / sgemm, gbps, vs_memcpy);
  return absl::OkStatus();
}

template <typename Build>
absl::Status MemoryCase(CpuDevice& device, Stream& stream, const Limits& lim,
                        std::string_view only, std::string_view name,
                        Build build) {
  if (name.find(only) == std::string_view::npos) return absl::OkStatus();
  OneOp op;
  TESSERA_RETURN_IF_ERROR(Prepare(device, build, op));
  size_t bytes = 0;
  for (Tensor* t : op.graph.leafs()) bytes += t->NumBytes();
  for (Tensor* t : op.graph.nodes()) bytes += t->NumBytes();
  TESSERA_ASSIGN_OR_RETURN(double seconds, TimeGraph(stream, op));
  const double bytes_per_s = bytes / seconds;
  PrintRow(name, seconds, 0, 0, bytes_per_s / 1e9,
           bytes_per_s / lim.memcpy_bytes_per_s);
  return absl::OkStatus();
}

absl::Status Main(int threads, SimdLevel simd, std::string_view only) {
  CpuDevice device(CpuDeviceOptions{
      .name = "cpu0", .n_threads = threads, .max_simd = simd});
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                           device.CreateStream());
  absl::PrintF("%s; OpenBLAS sgemm on %d threads\n", device.Props().description,
               threads);

  Limits lim;
  lim.memcpy_bytes_per_s = MemcpyBandwidth(threads);
  for (int64_t n : {1, 8, 512}) {
    lim.sgemm_flops.push_back({n, SgemmFlops(4096, n, 14336, threads)});
  }
  absl::PrintF("memcpy: %.2f GB/s\n", lim.memcpy_bytes_per_s / 1e9);
  for (const auto& [n, flops] : lim.sgemm_flops) {
    absl::PrintF("sgemm m=4096 k=14336 n=%d: %.1f GFLOPS\n", n, flops / 1e9);
  }
  PrintHeader();
  for (Type type : {Type::kF32, Type::kF16, Type::kQ8_0, Type::kQ4_0}) {
    for (int64_t n : {1, 8, 512}) {
      TESSERA_RETURN_IF_ERROR(MulMatCase(device, *stream, lim, only, type, n));
    }
  }
  TESSERA_RETURN_IF_ERROR(MemoryCase(
      device, *stream, lim, only, "ADD f32 [4096,512]",
      [](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(Type::kF32, {4096, 512}));
        TESSERA_ASSIGN_OR_RETURN(Tensor * b, ctx.NewTensor(Type::kF32, {4096, 512}));
        return Add(ctx, a, b);
      }));
  TESSERA_RETURN_IF_ERROR(MemoryCase(
      device, *stream, lim, only, "RMS_NORM f32 [4096,512]",
      [](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(Type::kF32, {4096, 512}));
        return RmsNorm(ctx, a, 1e-5f);
      }));
  TESSERA_RETURN_IF_ERROR(MemoryCase(
      device, *stream, lim, only, "SOFT_MAX f32 [4096,4096,5]",
      [](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * a,
                                 ctx.NewTensor(Type::kF32, {4096, 4096, 5}));
        return SoftMax(ctx, a, nullptr, 1.0f, 0.0f);
      }));
  TESSERA_RETURN_IF_ERROR(MemoryCase(
      device, *stream, lim, only, "ROPE f32 [128,32,512]",
      [](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * a,
                                 ctx.NewTensor(Type::kF32, {128, 32, 512}));
        TESSERA_ASSIGN_OR_RETURN(Tensor * pos, ctx.NewTensor(Type::kI32, {512}));
        RopeParams params;
        params.n_dims = 128;
        params.n_ctx_orig = 4096;
        return Rope(ctx, a, pos, params);
      }));
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
      if (!absl::SimpleAtoi(absl::string_view(arg).substr(10), &threads) || threads < 1) {
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
                    "usage: ops [--threads=N] [--simd=scalar|avx2|avx512] "
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
