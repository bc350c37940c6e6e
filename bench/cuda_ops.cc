// Single-op throughput of the CUDA device (backend/cuda), each row against
// a limit measured in the same run on the same GPU:
//  1. MUL_MAT with F16 and BF16 weights (8192^3, and the LLaMA shapes m =
//     4096, k = 14336, n = 1, 8, 512) computed through a CudaStream, against
//     cublasGemmEx called directly on the same operands: the weights in
//     place, the F32 activations converted beforehand to the weight type
//     (cuBLAS takes A and B of one type; tessera converts them inside the
//     op, and that conversion is in its time), an F32 result,
//     CUBLAS_COMPUTE_32F, the same transposition and leading dimensions as
//     backend/cuda/cuda_mul_mat.cc (for n = 1 tessera runs its own MatVec
//     kernel instead). Ratio = tessera / cuBLAS.
//  2. MUL_MAT n = 1 with quantized weights, and memory-bound ops (ADD,
//     RMS_NORM, SOFT_MAX, ROPE, FLASH_ATTN_EXT), against the GPU's DRAM
//     copy bandwidth: a device-to-device cudaMemcpyAsync of 1 GiB (far
//     larger than L2), counted as 2 x 1 GiB moved per copy (read and
//     written). An op moves every byte of its inputs once plus its output
//     (weights + activations + result). Ratio = op GB/s / copy GB/s. An
//     op whose data fits in L2 (ROPE's 16 MB) can end before its result
//     reaches DRAM, and so beat the copy.
//  3. Host <-> device copies of 256 MiB through Buffer::SetTensor and
//     GetTensor (synchronous) and Stream::SetTensorAsync and GetTensorAsync
//     (then Synchronize), from pinned memory (host_buffer_type()) and from
//     pageable memory, against cudaMemcpy (and cudaMemcpyAsync plus
//     cudaStreamSynchronize) of the same bytes between the same memory.
// Every GPU row is the median of --reps runs timed with CUDA events, after
// warm-up runs (enough for the device to replay the graph as a CUDA graph);
// before each timed run a kernel reads a buffer four times the L2 size, so
// every run starts with the operands in DRAM and the timed work queued
// behind it (host launch cost hidden, as in a stream of ops). Host <-> device
// rows are the median wall-clock time of --reps calls. Results are checked:
// MUL_MAT F16/BF16 against cuBLAS's result, the other ops against the
// reference kernels (graph/reference.h) on the same inputs, as NMSE; copies
// byte for byte. Each case is independent: a failure prints the row with
// its error and the run goes on; a run that outlives --timeout_s exits.
//
//   bazel run -c opt //bench:cuda_ops -- [--case=SUBSTRING] [--reps=N]
//                                        [--timeout_s=N]

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_handles.h"
#include "backend/cuda/cuda_stream.h"
#include "base/status_macros.h"
#include "bench/l2_flush.h"
#include "bench/loopback.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/reference.h"
#include "graph/type.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// Untimed runs before the timed ones: more than the device's CUDA graph
// cache needs to capture a repeated graph, so the timed runs replay it.
constexpr int kWarmupRuns = 5;
// The cuBLAS workspace of the direct calls: the size CudaStream gives its
// own handle.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
constexpr size_t kCopyLimitBytes = size_t{1} << 30;
constexpr size_t kTransferBytes = size_t{256} << 20;
// Leaf names that choose a fill other than random values.
constexpr std::string_view kCausalMask = "causal mask";
constexpr std::string_view kZeroMask = "zero mask";

struct Options {
  std::string only;  // run only the cases whose name contains this
  int reps = 15;
  int timeout_s = 300;
};

// Exits the process when a run takes longer than its limit, naming the case
// it was in, so that a hung kernel or driver call cannot hold the GPU
// machine.
class Watchdog {
 public:
  explicit Watchdog(int seconds)
      : limit_(absl::Seconds(seconds)), thread_([this] { Run(); }) {}
  ~Watchdog() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Enter(std::string_view case_name) {
    absl::MutexLock lock(&mu_);
    current_ = std::string(case_name);
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&done_), limit_)) return;
    std::fflush(stdout);
    absl::FPrintF(stderr,
                  "cuda_ops: still running after %s, in case %s; exiting\n",
                  absl::FormatDuration(limit_), current_);
    std::fflush(stderr);
    std::_Exit(124);
  }

  const absl::Duration limit_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::string current_ ABSL_GUARDED_BY(mu_) = "setup";
  // Last: started once the members above exist.
  std::thread thread_;
};

// What every case uses.
struct Bench {
  CudaDevice& device;
  Options options;
  Watchdog& watchdog;
  PoolMemory<> flush;  // zeroed, for FlushL2
  size_t flush_bytes = 0;
  double copy_bytes_per_s = 0;  // the DRAM limit; 0 when not measured
};

int HostThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(n, 1u, 32u));
}

// Runs fn(begin, end) over parts of [0, n) on HostThreads() threads.
template <typename Fn>
void ParallelFor(int64_t n, Fn fn) {
  const int64_t parts = std::min<int64_t>(HostThreads(), n);
  if (parts <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> team;
  for (int64_t p = 0; p < parts; ++p) {
    team.emplace_back(fn, n * p / parts, n * (p + 1) / parts);
  }
  for (std::thread& t : team) t.join();
}

// A deterministic value in [-1, 1) for element `i` of the leaf `seed`.
float ValueAt(uint32_t seed, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t{seed} << 32);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 33;
  return static_cast<float>(x >> 40) / static_cast<float>(1 << 23) - 1.0f;
}

// The bytes of a contiguous leaf: I32 leafs count 0, 1, 2, ...; a leaf
// named kCausalMask [n_kv, n_q] is 0 where position <= query and -inf
// elsewhere; kZeroMask is zeros; anything else is ValueAt(seed, i)
// converted to the leaf's type, row by row.
absl::StatusOr<std::vector<char>> LeafBytes(const Tensor& leaf, uint32_t seed) {
  if (!leaf.IsContiguous() || leaf.IsView()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leaf ", Describe(leaf), " is not a contiguous tensor of its own"));
  }
  std::vector<char> bytes(leaf.NumBytes());
  if (leaf.type == Type::kI32) {
    for (int64_t i = 0; i < leaf.NumElements(); ++i) {
      const int32_t v = static_cast<int32_t>(i);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
    return bytes;
  }
  if (leaf.type == Type::kI64) {
    return absl::InvalidArgumentError(
        absl::StrCat("no fill for leaf ", Describe(leaf)));
  }
  const int64_t n0 = leaf.ne[0];
  const size_t row_bytes = RowSize(leaf.type, n0);
  ParallelFor(leaf.NumRows(), [&](int64_t begin, int64_t end) {
    std::vector<float> values(n0);
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t i = 0; i < n0; ++i) {
        if (leaf.name == kCausalMask) {
          values[i] = i <= r % leaf.ne[1] ? 0.0f : -INFINITY;
        } else if (leaf.name == kZeroMask) {
          values[i] = 0.0f;
        } else {
          values[i] = ValueAt(seed, static_cast<uint64_t>(r * n0 + i));
        }
      }
      RowFromFloat(leaf.type, values.data(), bytes.data() + r * row_bytes, n0);
    }
  });
  return bytes;
}

// sum((got - want)^2) / sum(want^2) (the plain sum when sum(want^2) is 0);
// infinity for a non-finite value in `got`.
double Nmse(const float* got, const float* want, size_t n) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0 ? err / norm : err;
}

absl::StatusOr<CudaStreamHandle> NewRawStream(CudaDevice& device) {
  cudaStream_t stream = nullptr;
  TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)));
  return CudaStreamHandle(device, stream);
}

absl::Status SyncRaw(cudaStream_t stream) {
  return TESSERA_CUDA_STATUS(cudaStreamSynchronize(stream));
}

// Seconds per run of `enqueue` (which queues one run on `stream`): the
// median of options.reps runs, each between two CUDA events recorded right
// after an L2 flush, following kWarmupRuns untimed runs. `sync` waits for
// the stream and returns its status (a CudaStream's sticky status, or
// cudaStreamSynchronize's). Waits for the stream before returning, also on
// errors, so that no queued work outlives the memory it uses.
absl::StatusOr<double> GpuTime(Bench& bench, cudaStream_t stream,
                               absl::FunctionRef<absl::Status()> enqueue,
                               absl::FunctionRef<absl::Status()> sync) {
  absl::Status queued;
  for (int i = 0; i < kWarmupRuns && queued.ok(); ++i) queued = enqueue();
  absl::Status synced = sync();
  TESSERA_RETURN_IF_ERROR(queued);
  TESSERA_RETURN_IF_ERROR(synced);

  const int reps = bench.options.reps;
  std::vector<CudaEventHandle> events;
  for (int i = 0; i < 2 * reps; ++i) {
    cudaEvent_t event = nullptr;
    TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(cudaEventCreate(&event)));
    events.emplace_back(bench.device, event);
  }
  for (int r = 0; r < reps && queued.ok(); ++r) {
    queued = TESSERA_CUDA_STATUS(
        tessera::bench::FlushL2(bench.flush.get(), bench.flush_bytes, stream));
    if (queued.ok()) {
      queued =
          TESSERA_CUDA_STATUS(cudaEventRecord(events[2 * r].get(), stream));
    }
    if (queued.ok()) queued = enqueue();
    if (queued.ok()) {
      queued =
          TESSERA_CUDA_STATUS(cudaEventRecord(events[2 * r + 1].get(), stream));
    }
  }
  synced = sync();
  TESSERA_RETURN_IF_ERROR(queued);
  TESSERA_RETURN_IF_ERROR(synced);
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(cudaEventElapsedTime(
        &ms, events[2 * r].get(), events[2 * r + 1].get())));
    seconds.push_back(ms * 1e-3);
  }
  return bench::Percentile(seconds, 0.5);
}

// Median wall-clock seconds of options.reps calls of fn, after one.
absl::StatusOr<double> HostTime(const Bench& bench,
                                absl::FunctionRef<absl::Status()> fn) {
  TESSERA_RETURN_IF_ERROR(fn());
  std::vector<double> seconds;
  for (int r = 0; r < bench.options.reps; ++r) {
    const auto start = Clock::now();
    TESSERA_RETURN_IF_ERROR(fn());
    seconds.push_back(
        std::chrono::duration<double>(Clock::now() - start).count());
  }
  return bench::Percentile(seconds, 0.5);
}

// A graph of one op, every tensor in one device buffer, leafs filled.
struct OneOp {
  Context ctx;
  Graph graph;
  Tensor* out = nullptr;
  std::unique_ptr<Buffer> buffer;
  std::vector<std::vector<char>> leaf_bytes;  // in graph.leafs() order
};

using Build = absl::FunctionRef<absl::StatusOr<Tensor*>(Context&)>;

absl::Status Prepare(CudaDevice& device, Build build, OneOp& op) {
  TESSERA_ASSIGN_OR_RETURN(op.out, build(op.ctx));
  TESSERA_RETURN_IF_ERROR(op.graph.Expand(op.out));
  std::vector<Tensor*> all(op.graph.leafs().begin(), op.graph.leafs().end());
  all.insert(all.end(), op.graph.nodes().begin(), op.graph.nodes().end());
  TESSERA_ASSIGN_OR_RETURN(op.buffer, AllocTensors(device.buffer_type(), all));
  uint32_t seed = 1;
  for (Tensor* leaf : op.graph.leafs()) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<char> bytes, LeafBytes(*leaf, seed++));
    TESSERA_RETURN_IF_ERROR(
        leaf->buffer->SetTensor(*leaf, bytes.data(), 0, bytes.size()));
    op.leaf_bytes.push_back(std::move(bytes));
  }
  return absl::OkStatus();
}

// The index of `leaf` in op's leafs.
absl::StatusOr<size_t> LeafIndex(const OneOp& op, const Tensor* leaf) {
  const auto leafs = op.graph.leafs();
  const auto it = std::find(leafs.begin(), leafs.end(), leaf);
  if (it == leafs.end()) {
    return absl::InternalError("tensor is not a leaf of the graph");
  }
  return static_cast<size_t>(it - leafs.begin());
}

// op's F32 result, read from the device.
absl::StatusOr<std::vector<float>> ReadResult(const OneOp& op) {
  if (op.out->type != Type::kF32 || !op.out->IsContiguous()) {
    return absl::InternalError(
        absl::StrCat("result ", Describe(*op.out), " is not contiguous F32"));
  }
  std::vector<float> values(op.out->NumElements());
  TESSERA_RETURN_IF_ERROR(
      op.buffer->GetTensor(*op.out, values.data(), 0, op.out->NumBytes()));
  return values;
}

// The NMSE of op's device result against the reference kernels computing
// `build`'s graph (built again, in host memory) on the same leaf bytes, on
// HostThreads() threads.
absl::StatusOr<double> ReferenceNmse(const OneOp& op, Build build) {
  Context ctx;
  TESSERA_ASSIGN_OR_RETURN(Tensor * out, build(ctx));
  Graph graph;
  TESSERA_RETURN_IF_ERROR(graph.Expand(out));
  if (graph.leafs().size() != op.leaf_bytes.size() ||
      graph.nodes().size() != op.graph.nodes().size() ||
      out->NumBytes() != op.out->NumBytes()) {
    return absl::InternalError("the reference graph differs from the device's");
  }
  std::vector<std::unique_ptr<char[]>> storage;
  auto place = [&storage](Tensor& t) {
    if (t.view_src != nullptr) {
      t.data = static_cast<char*>(t.view_src->data) + t.view_offs;
      return;
    }
    storage.push_back(std::make_unique<char[]>(t.NumBytes() + 1));
    t.data = storage.back().get();
  };
  for (size_t i = 0; i < graph.leafs().size(); ++i) {
    Tensor& leaf = *graph.leafs()[i];
    if (leaf.NumBytes() != op.leaf_bytes[i].size()) {
      return absl::InternalError("a reference leaf differs from the device's");
    }
    place(leaf);
    std::memcpy(leaf.data, op.leaf_bytes[i].data(), op.leaf_bytes[i].size());
  }
  for (Tensor* node : graph.nodes()) place(*node);
  const int nth = HostThreads();
  for (Tensor* node : graph.nodes()) {
    std::vector<absl::Status> statuses(nth);
    std::vector<std::thread> team;
    for (int ith = 0; ith < nth; ++ith) {
      team.emplace_back(
          [&, ith] { statuses[ith] = ReferenceCompute(*node, ith, nth); });
    }
    for (std::thread& t : team) t.join();
    for (const absl::Status& s : statuses) TESSERA_RETURN_IF_ERROR(s);
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<float> got, ReadResult(op));
  return Nmse(got.data(), static_cast<const float*>(out->data), got.size());
}

std::string Cell(double v, int precision) {
  return v > 0 ? absl::StrFormat("%.*f", precision, v) : std::string("-");
}

// " *" when `ratio` is below `target`.
std::string_view Flag(double ratio, double target) {
  return ratio > 0 && ratio < target ? " *" : "";
}

void PrintNmse(absl::StatusOr<double> nmse, std::string& note) {
  if (nmse.ok()) {
    absl::PrintF(" %9.1e", *nmse);
  } else {
    absl::PrintF(" %9s", "ERROR");
    note = absl::StrCat("    check failed: ", nmse.status().ToString(), "\n");
  }
}

// ---------------------------------------------------------------------------
// 1. MUL_MAT F16 / BF16 against cuBLAS.

constexpr double kGemmTarget = 0.95;

void PrintGemmHeader() {
  absl::PrintF(
      "\nMUL_MAT, weights F16/BF16 [k, m], activations F32 [k, n], result F32 "
      "[m, n]:\ntessera (CudaStream::ComputeAsync) against cublasGemmEx(T, N, "
      "m, n, k; A = the weights in place, B = the activations converted to "
      "the\nweight type beforehand, C F32, CUBLAS_COMPUTE_32F) on the same "
      "GPU. TFLOP/s = 2mnk / time. ratio = tessera / cuBLAS (target >= "
      "%.2f;\n* below). nmse: tessera's result against cuBLAS's.\n",
      kGemmTarget);
  absl::PrintF("%-40s %10s %8s %10s %8s %6s %9s\n", "case", "us", "TFLOP/s",
               "cuBLAS us", "TFLOP/s", "ratio", "nmse");
}

absl::Status GemmCase(Bench& bench, std::string_view name, Type type, int64_t m,
                      int64_t n, int64_t k) {
  CudaDevice& device = bench.device;
  OneOp op;
  Tensor* weights = nullptr;
  Tensor* x = nullptr;
  TESSERA_RETURN_IF_ERROR(Prepare(
      device,
      [&](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(weights, ctx.NewTensor(type, {k, m}));
        TESSERA_ASSIGN_OR_RETURN(x, ctx.NewTensor(Type::kF32, {k, n}));
        return MulMat(ctx, weights, x);
      },
      op));

  // cuBLAS's B: the same activations converted to the weight type.
  TESSERA_ASSIGN_OR_RETURN(const size_t x_index, LeafIndex(op, x));
  const auto* x_values =
      reinterpret_cast<const float*>(op.leaf_bytes[x_index].data());
  const size_t b_bytes = RowSize(type, k) * n;
  std::vector<char> b_host(b_bytes);
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      RowFromFloat(type, x_values + j * k, b_host.data() + j * RowSize(type, k),
                   k);
    }
  });
  const size_t c_bytes = sizeof(float) * m * n;
  TESSERA_ASSIGN_OR_RETURN(PoolMemory<> b,
                           AllocatePool(device.pool(), b_bytes));
  TESSERA_ASSIGN_OR_RETURN(PoolMemory<> c,
                           AllocatePool(device.pool(), c_bytes));
  TESSERA_ASSIGN_OR_RETURN(PoolMemory<> workspace,
                           AllocatePool(device.pool(), kCublasWorkspaceBytes));
  TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(
      cudaMemcpy(b.get(), b_host.data(), b_bytes, cudaMemcpyHostToDevice)));

  // Streams after the memory they use: destroyed (and waited for) first.
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<CudaStream> stream,
                           CudaStream::Create(device));
  TESSERA_ASSIGN_OR_RETURN(CudaStreamHandle raw, NewRawStream(device));
  cublasHandle_t raw_cublas = nullptr;
  TESSERA_RETURN_IF_ERROR(TESSERA_CUBLAS_STATUS(cublasCreate(&raw_cublas)));
  const CublasHandle cublas(device, raw_cublas);
  TESSERA_RETURN_IF_ERROR(
      TESSERA_CUBLAS_STATUS(cublasSetStream(cublas.get(), raw.get())));
  TESSERA_RETURN_IF_ERROR(TESSERA_CUBLAS_STATUS(cublasSetWorkspace(
      cublas.get(), workspace.get(), kCublasWorkspaceBytes)));

  TESSERA_ASSIGN_OR_RETURN(const double tessera_s,
                           GpuTime(
                               bench, stream->handle(),
                               [&] { return stream->ComputeAsync(op.graph); },
                               [&] { return stream->Synchronize(); }));
  const cudaDataType_t cuda_type =
      type == Type::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f;
  const float beta = 0.0f;
  TESSERA_ASSIGN_OR_RETURN(
      const double cublas_s,
      GpuTime(
          bench, raw.get(),
          [&] {
            return TESSERA_CUBLAS_STATUS(cublasGemmEx(
                cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), &alpha, weights->data,
                cuda_type, static_cast<int>(k), b.get(), cuda_type,
                static_cast<int>(k), &beta, c.get(), CUDA_R_32F,
                static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
          },
          [&] { return SyncRaw(raw.get()); }));

  // Both results are column j = activation j, m values each.
  absl::StatusOr<double> nmse = [&]() -> absl::StatusOr<double> {
    TESSERA_ASSIGN_OR_RETURN(std::vector<float> got, ReadResult(op));
    std::vector<float> want(m * n);
    TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(
        cudaMemcpy(want.data(), c.get(), c_bytes, cudaMemcpyDeviceToHost)));
    return Nmse(got.data(), want.data(), want.size());
  }();

  const double flops = 2.0 * m * n * k;
  const double ratio = cublas_s / tessera_s;
  absl::PrintF("%-40s %10.1f %8.1f %10.1f %8.1f %6.2f", name, tessera_s * 1e6,
               flops / tessera_s / 1e12, cublas_s * 1e6,
               flops / cublas_s / 1e12, ratio);
  std::string note;
  PrintNmse(std::move(nmse), note);
  absl::PrintF("%s\n%s", Flag(ratio, kGemmTarget), note);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// 2. Memory-bound ops against the DRAM copy bandwidth.

constexpr double kMemoryTarget = 0.7;

void PrintMemoryHeader(const Bench& bench) {
  absl::PrintF(
      "\nMemory-bound ops against DRAM copy bandwidth. op GB/s = (bytes of "
      "every input + bytes of the result) / time, each byte counted once;\n"
      "copy GB/s = 2 x %d MiB / time of one device-to-device cudaMemcpyAsync "
      "(it reads and writes every byte) = %s GB/s. ratio = op GB/s /\ncopy "
      "GB/s (target >= %.2f; * below). TFLOP/s for prompt attention counts "
      "every query-position pair (4 d n_q n_kv heads), masked or not.\n"
      "nmse: against the reference kernels on the same inputs.\n",
      kCopyLimitBytes >> 20, Cell(bench.copy_bytes_per_s / 1e9, 0),
      kMemoryTarget);
  absl::PrintF("%-40s %10s %9s %8s %9s %6s %8s %9s\n", "case", "us", "MB",
               "GB/s", "copy GB/s", "ratio", "TFLOP/s", "nmse");
}

// `build`'s one-op graph through a CudaStream; `flops` 0 prints no TFLOP/s.
absl::Status MemoryCase(Bench& bench, std::string_view name, Build build,
                        double flops = 0) {
  OneOp op;
  TESSERA_RETURN_IF_ERROR(Prepare(bench.device, build, op));
  size_t bytes = op.out->NumBytes();
  for (const std::vector<char>& leaf : op.leaf_bytes) bytes += leaf.size();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<CudaStream> stream,
                           CudaStream::Create(bench.device));
  TESSERA_ASSIGN_OR_RETURN(const double seconds,
                           GpuTime(
                               bench, stream->handle(),
                               [&] { return stream->ComputeAsync(op.graph); },
                               [&] { return stream->Synchronize(); }));
  absl::StatusOr<double> nmse = ReferenceNmse(op, build);
  const double bytes_per_s = bytes / seconds;
  const double ratio =
      bench.copy_bytes_per_s > 0 ? bytes_per_s / bench.copy_bytes_per_s : 0;
  absl::PrintF("%-40s %10.1f %9.1f %8.0f %9s %6s %8s", name, seconds * 1e6,
               bytes / 1e6, bytes_per_s / 1e9,
               Cell(bench.copy_bytes_per_s / 1e9, 0), Cell(ratio, 2),
               Cell(flops / seconds / 1e12, 1));
  std::string note;
  PrintNmse(std::move(nmse), note);
  absl::PrintF("%s\n%s", Flag(ratio, kMemoryTarget), note);
  return absl::OkStatus();
}

// Bytes per second of a device-to-device copy of kCopyLimitBytes, counting
// each byte twice (read and written).
absl::StatusOr<double> CopyLimit(Bench& bench) {
  CudaDevice& device = bench.device;
  TESSERA_ASSIGN_OR_RETURN(PoolMemory<> src,
                           AllocatePool(device.pool(), kCopyLimitBytes));
  TESSERA_ASSIGN_OR_RETURN(PoolMemory<> dst,
                           AllocatePool(device.pool(), kCopyLimitBytes));
  TESSERA_RETURN_IF_ERROR(
      TESSERA_CUDA_STATUS(cudaMemset(src.get(), 1, kCopyLimitBytes)));
  TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(cudaDeviceSynchronize()));
  TESSERA_ASSIGN_OR_RETURN(CudaStreamHandle raw, NewRawStream(device));
  TESSERA_ASSIGN_OR_RETURN(const double seconds,
                           GpuTime(
                               bench, raw.get(),
                               [&] {
                                 return TESSERA_CUDA_STATUS(cudaMemcpyAsync(
                                     dst.get(), src.get(), kCopyLimitBytes,
                                     cudaMemcpyDeviceToDevice, raw.get()));
                               },
                               [&] { return SyncRaw(raw.get()); }));
  return 2.0 * kCopyLimitBytes / seconds;
}

absl::Status QuantMatVecCase(Bench& bench, std::string_view name, Type type) {
  constexpr int64_t kM = 4096, kK = 14336;
  return MemoryCase(bench, name, [&](Context& ctx) -> absl::StatusOr<Tensor*> {
    TESSERA_ASSIGN_OR_RETURN(Tensor * w, ctx.NewTensor(type, {kK, kM}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * x, ctx.NewTensor(Type::kF32, {kK, 1}));
    return MulMat(ctx, w, x);
  });
}

// FLASH_ATTN_EXT: 32 query heads over 8 F16 K/V heads of 128, n_kv cached
// positions; decode (one query, every position visible) or prompt (n_q =
// n_kv queries, causal mask).
absl::Status FlashAttnCase(Bench& bench, std::string_view name, int64_t n_q,
                           int64_t n_kv) {
  constexpr int64_t kD = 128, kHeads = 32, kKvHeads = 8;
  const bool causal = n_q > 1;
  const double flops = causal ? 4.0 * kD * n_q * n_kv * kHeads : 0;
  return MemoryCase(
      bench, name,
      [&](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * q,
                                 ctx.NewTensor(Type::kF32, {kD, n_q, kHeads}));
        TESSERA_ASSIGN_OR_RETURN(
            Tensor * k, ctx.NewTensor(Type::kF16, {kD, n_kv, kKvHeads}));
        TESSERA_ASSIGN_OR_RETURN(
            Tensor * v, ctx.NewTensor(Type::kF16, {kD, n_kv, kKvHeads}));
        TESSERA_ASSIGN_OR_RETURN(Tensor * mask,
                                 ctx.NewTensor(Type::kF16, {n_kv, n_q}));
        mask->name = std::string(causal ? kCausalMask : kZeroMask);
        return FlashAttnExt(ctx, q, k, v, mask,
                            1.0f / std::sqrt(static_cast<float>(kD)), 0.0f,
                            0.0f);
      },
      flops);
}

absl::Status RopeCase(Bench& bench, std::string_view name, int32_t mode) {
  return MemoryCase(bench, name, [&](Context& ctx) -> absl::StatusOr<Tensor*> {
    TESSERA_ASSIGN_OR_RETURN(Tensor * a,
                             ctx.NewTensor(Type::kF32, {128, 32, 512}));
    TESSERA_ASSIGN_OR_RETURN(Tensor * pos, ctx.NewTensor(Type::kI32, {512}));
    RopeParams params;
    params.n_dims = 128;
    params.mode = mode;
    params.n_ctx_orig = 4096;
    return Rope(ctx, a, pos, params);
  });
}

absl::Status SoftMaxCase(Bench& bench, std::string_view name, bool masked) {
  return MemoryCase(bench, name, [&](Context& ctx) -> absl::StatusOr<Tensor*> {
    TESSERA_ASSIGN_OR_RETURN(Tensor * a,
                             ctx.NewTensor(Type::kF32, {4096, 4096}));
    Tensor* mask = nullptr;
    if (masked) {
      TESSERA_ASSIGN_OR_RETURN(mask, ctx.NewTensor(Type::kF32, {4096, 4096}));
    }
    return SoftMax(ctx, a, mask, 0.0884f, 0.0f);
  });
}

// ---------------------------------------------------------------------------
// 3. Host <-> device copies.

constexpr double kTransferTarget = 0.9;

void PrintTransferHeader() {
  absl::PrintF(
      "\nHost <-> device copies of %d MiB: tessera's call against the CUDA "
      "call it stands for, between the same memory (GB/s = bytes / median "
      "wall-clock\ntime). ratio = tessera / CUDA (target >= %.2f; * below). "
      "check: the bytes that arrived equal the bytes sent.\n",
      kTransferBytes >> 20, kTransferTarget);
  absl::PrintF("%-40s %10s %8s %-28s %8s %6s %6s\n", "case", "ms", "GB/s",
               "against", "GB/s", "ratio", "check");
}

// The memory the transfer cases share.
struct TransferMemory {
  Context ctx;
  Tensor* tensor = nullptr;  // F32, kTransferBytes, in `device`
  std::unique_ptr<Buffer> device;
  std::unique_ptr<Buffer> pinned;
  std::vector<char> pageable;
  std::vector<char> pattern;
};

absl::Status PrepareTransfers(CudaDevice& device, TransferMemory& mem) {
  const int64_t n = kTransferBytes / sizeof(float);
  TESSERA_ASSIGN_OR_RETURN(mem.tensor, mem.ctx.NewTensor(Type::kF32, {n}));
  Tensor* const all[] = {mem.tensor};
  TESSERA_ASSIGN_OR_RETURN(mem.device, AllocTensors(device.buffer_type(), all));
  if (device.host_buffer_type() == nullptr) {
    return absl::FailedPreconditionError("the device has no host buffer type");
  }
  TESSERA_ASSIGN_OR_RETURN(mem.pinned,
                           device.host_buffer_type()->Alloc(kTransferBytes));
  mem.pageable.assign(kTransferBytes, 0);
  mem.pattern.resize(kTransferBytes);
  for (size_t i = 0; i < kTransferBytes; ++i) {
    mem.pattern[i] = static_cast<char>((i * 131 + (i >> 12)) & 0xff);
  }
  return absl::OkStatus();
}

enum class Path { kBuffer, kStream };

// One direction through one path from one kind of host memory:
//  1. clears the destination, times tessera's call, checks the bytes;
//  2. times the CUDA call between the same memory.
absl::Status TransferCase(Bench& bench, std::string_view name,
                          TransferMemory& mem, Path path, bool to_device,
                          bool pinned) {
  CudaDevice& device = bench.device;
  Tensor& t = *mem.tensor;
  char* host =
      pinned ? static_cast<char*>(mem.pinned->base()) : mem.pageable.data();
  const size_t size = kTransferBytes;
  // Streams after the memory they use: destroyed (and waited for) first.
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<CudaStream> stream,
                           CudaStream::Create(device));
  TESSERA_ASSIGN_OR_RETURN(CudaStreamHandle raw, NewRawStream(device));

  if (to_device) {
    std::memcpy(host, mem.pattern.data(), size);
    TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(cudaMemset(t.data, 0, size)));
    TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(cudaDeviceSynchronize()));
  } else {
    TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(
        cudaMemcpy(t.data, mem.pattern.data(), size, cudaMemcpyHostToDevice)));
    std::memset(host, 0, size);
  }
  TESSERA_ASSIGN_OR_RETURN(
      const double tessera_s, HostTime(bench, [&]() -> absl::Status {
        if (path == Path::kBuffer) {
          return to_device ? t.buffer->SetTensor(t, host, 0, size)
                           : t.buffer->GetTensor(t, host, 0, size);
        }
        TESSERA_RETURN_IF_ERROR(to_device
                                    ? stream->SetTensorAsync(t, host, 0, size)
                                    : stream->GetTensorAsync(t, host, 0, size));
        return stream->Synchronize();
      }));
  bool same = false;
  if (to_device) {
    std::vector<char> arrived(size);
    TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(
        cudaMemcpy(arrived.data(), t.data, size, cudaMemcpyDeviceToHost)));
    same = std::memcmp(arrived.data(), mem.pattern.data(), size) == 0;
  } else {
    same = std::memcmp(host, mem.pattern.data(), size) == 0;
  }

  const cudaMemcpyKind kind =
      to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  void* dst = to_device ? t.data : host;
  const void* src = to_device ? static_cast<const void*>(host) : t.data;
  TESSERA_ASSIGN_OR_RETURN(
      const double cuda_s, HostTime(bench, [&]() -> absl::Status {
        if (path == Path::kBuffer) {
          return TESSERA_CUDA_STATUS(cudaMemcpy(dst, src, size, kind));
        }
        TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(
            cudaMemcpyAsync(dst, src, size, kind, raw.get())));
        return SyncRaw(raw.get());
      }));
  const double ratio = cuda_s / tessera_s;
  absl::PrintF("%-40s %10.2f %8.2f %-28s %8.2f %6.2f %6s%s\n", name,
               tessera_s * 1e3, size / tessera_s / 1e9,
               path == Path::kBuffer ? "cudaMemcpy" : "cudaMemcpyAsync + sync",
               size / cuda_s / 1e9, ratio, same ? "ok" : "DIFFER",
               Flag(ratio, kTransferTarget));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

bool Selected(const Bench& bench, std::string_view name) {
  return name.find(bench.options.only) != std::string_view::npos;
}

// fn's status; an exception it throws (std::bad_alloc from a host vector)
// as INTERNAL, so that one case cannot end the run.
absl::Status Guarded(absl::FunctionRef<absl::Status()> fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("exception: ", e.what()));
  }
}

// Runs `fn` (which prints the case's row) when `name` is selected; prints
// the case's error instead of a row when it fails.
void RunCase(Bench& bench, std::string_view name,
             absl::FunctionRef<absl::Status()> fn) {
  if (!Selected(bench, name)) return;
  bench.watchdog.Enter(name);
  if (absl::Status s = Guarded(fn); !s.ok()) {
    absl::PrintF("%-40s ERROR %s\n", name, s.ToString());
  }
  std::fflush(stdout);
}

void PrintDevice(CudaDevice& device) {
  const cudaDeviceProp& p = device.properties();
  int driver = 0, runtime = 0;
  const absl::Status d = TESSERA_CUDA_STATUS(cudaDriverGetVersion(&driver));
  const absl::Status r = TESSERA_CUDA_STATUS(cudaRuntimeGetVersion(&runtime));
  absl::PrintF("%s: sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", p.name, p.major,
               p.minor, p.multiProcessorCount,
               static_cast<double>(p.totalGlobalMem) / (1 << 30),
               static_cast<double>(p.l2CacheSize) / (1 << 20));
  absl::PrintF(
      "CUDA driver %s, runtime %s\n",
      d.ok() ? absl::StrFormat("%d.%d", driver / 1000, driver % 1000 / 10)
             : d.ToString(),
      r.ok() ? absl::StrFormat("%d.%d", runtime / 1000, runtime % 1000 / 10)
             : r.ToString());
}

absl::Status Main(const Options& options) {
  Watchdog watchdog(options.timeout_s);
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device,
                           CudaDevice::Create(CudaDeviceOptions{}));
  PrintDevice(*device);
  Bench bench{.device = *device, .options = options, .watchdog = watchdog};
  bench.flush_bytes = std::max<size_t>(
      size_t{256} << 20,
      4 * static_cast<size_t>(device->properties().l2CacheSize));
  bench.flush_bytes = (bench.flush_bytes + 15) / 16 * 16;
  TESSERA_ASSIGN_OR_RETURN(bench.flush,
                           AllocatePool(device->pool(), bench.flush_bytes));
  TESSERA_RETURN_IF_ERROR(
      TESSERA_CUDA_STATUS(cudaMemset(bench.flush.get(), 0, bench.flush_bytes)));
  TESSERA_RETURN_IF_ERROR(TESSERA_CUDA_STATUS(cudaDeviceSynchronize()));
  absl::PrintF(
      "median of %d runs; before each GPU run a %d MiB read empties L2\n",
      options.reps, bench.flush_bytes >> 20);
  std::fflush(stdout);

  // 1.
  bool header = false;
  for (Type type : {Type::kF16, Type::kBF16}) {
    struct Shape {
      int64_t m, n, k;
    };
    for (const Shape s : {Shape{8192, 8192, 8192}, Shape{4096, 1, 14336},
                          Shape{4096, 8, 14336}, Shape{4096, 512, 14336}}) {
      const std::string name = absl::StrFormat("MUL_MAT %s m=%d n=%d k=%d",
                                               TypeName(type), s.m, s.n, s.k);
      if (!Selected(bench, name)) continue;
      if (!header) PrintGemmHeader();
      header = true;
      RunCase(bench, name,
              [&] { return GemmCase(bench, name, type, s.m, s.n, s.k); });
    }
  }

  // 2. The copy limit is measured only when a row needs it.
  struct MemoryRow {
    std::string name;
    std::function<absl::Status(std::string_view)> run;
  };
  std::vector<MemoryRow> rows;
  for (Type type : {Type::kQ8_0, Type::kQ4_0, Type::kQ4_1, Type::kQ5_0,
                    Type::kQ5_1, Type::kQ2_K, Type::kQ3_K, Type::kQ4_K,
                    Type::kQ5_K, Type::kQ6_K}) {
    rows.push_back(
        {absl::StrFormat("MUL_MAT %s m=4096 n=1 k=14336", TypeName(type)),
         [&bench, type](std::string_view name) {
           return QuantMatVecCase(bench, name, type);
         }});
  }
  rows.push_back(
      {"ADD f32 [4096,4096] + [4096,4096]", [&bench](std::string_view name) {
         return MemoryCase(
             bench, name, [](Context& ctx) -> absl::StatusOr<Tensor*> {
               TESSERA_ASSIGN_OR_RETURN(
                   Tensor * a, ctx.NewTensor(Type::kF32, {4096, 4096}));
               TESSERA_ASSIGN_OR_RETURN(
                   Tensor * b, ctx.NewTensor(Type::kF32, {4096, 4096}));
               return Add(ctx, a, b);
             });
       }});
  rows.push_back(
      {"RMS_NORM f32 [4096,4096]", [&bench](std::string_view name) {
         return MemoryCase(
             bench, name, [](Context& ctx) -> absl::StatusOr<Tensor*> {
               TESSERA_ASSIGN_OR_RETURN(
                   Tensor * a, ctx.NewTensor(Type::kF32, {4096, 4096}));
               return RmsNorm(ctx, a, 1e-5f);
             });
       }});
  rows.push_back({"SOFT_MAX f32 [4096,4096]", [&bench](std::string_view name) {
                    return SoftMaxCase(bench, name, false);
                  }});
  rows.push_back(
      {"SOFT_MAX f32 [4096,4096] mask f32", [&bench](std::string_view name) {
         return SoftMaxCase(bench, name, true);
       }});
  rows.push_back(
      {"ROPE f32 [128,32,512] normal", [&bench](std::string_view name) {
         return RopeCase(bench, name, kRopeNormal);
       }});
  rows.push_back(
      {"ROPE f32 [128,32,512] neox", [&bench](std::string_view name) {
         return RopeCase(bench, name, kRopeNeox);
       }});
  rows.push_back(
      {"FLASH_ATTN_EXT decode q=1 kv=4096", [&bench](std::string_view name) {
         return FlashAttnCase(bench, name, 1, 4096);
       }});
  rows.push_back({"FLASH_ATTN_EXT prompt causal q=512 kv=512",
                  [&bench](std::string_view name) {
                    return FlashAttnCase(bench, name, 512, 512);
                  }});
  if (std::any_of(rows.begin(), rows.end(), [&](const MemoryRow& row) {
        return Selected(bench, row.name);
      })) {
    bench.watchdog.Enter("copy limit");
    const absl::Status copy = Guarded([&]() -> absl::Status {
      TESSERA_ASSIGN_OR_RETURN(bench.copy_bytes_per_s, CopyLimit(bench));
      return absl::OkStatus();
    });
    if (!copy.ok()) {
      absl::PrintF("\ncopy limit: ERROR %s (ratios left out)\n",
                   copy.ToString());
    }
    PrintMemoryHeader(bench);
    for (const MemoryRow& row : rows) {
      RunCase(bench, row.name, [&] { return row.run(row.name); });
    }
  }

  // 3.
  struct TransferRow {
    std::string name;
    Path path;
    bool to_device;
    bool pinned;
  };
  std::vector<TransferRow> transfers;
  for (const Path path : {Path::kBuffer, Path::kStream}) {
    for (const bool to_device : {true, false}) {
      for (const bool pinned : {true, false}) {
        const std::string call =
            path == Path::kBuffer
                ? (to_device ? "Buffer::SetTensor" : "Buffer::GetTensor")
                : (to_device ? "Stream::SetTensorAsync"
                             : "Stream::GetTensorAsync");
        transfers.push_back({absl::StrCat(call, to_device ? " from " : " to ",
                                          pinned ? "pinned" : "pageable"),
                             path, to_device, pinned});
      }
    }
  }
  if (std::any_of(
          transfers.begin(), transfers.end(),
          [&](const TransferRow& row) { return Selected(bench, row.name); })) {
    PrintTransferHeader();
    bench.watchdog.Enter("transfer memory");
    TransferMemory mem;
    if (absl::Status s =
            Guarded([&] { return PrepareTransfers(*device, mem); });
        !s.ok()) {
      absl::PrintF("transfer memory: ERROR %s\n", s.ToString());
    } else {
      for (const TransferRow& row : transfers) {
        RunCase(bench, row.name, [&] {
          return TransferCase(bench, row.name, mem, row.path, row.to_device,
                              row.pinned);
        });
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("--case=")) {
      options.only = arg.substr(7);
    } else if (arg.starts_with("--reps=")) {
      if (!absl::SimpleAtoi(absl::string_view(arg).substr(7), &options.reps) ||
          options.reps < 1 || options.reps > 1000) {
        absl::FPrintF(stderr, "bad %s: want --reps=N, 1 <= N <= 1000\n", arg);
        return 2;
      }
    } else if (arg.starts_with("--timeout_s=")) {
      if (!absl::SimpleAtoi(absl::string_view(arg).substr(12),
                            &options.timeout_s) ||
          options.timeout_s < 1) {
        absl::FPrintF(stderr, "bad %s: want --timeout_s=N, N >= 1\n", arg);
        return 2;
      }
    } else {
      absl::FPrintF(stderr,
                    "usage: cuda_ops [--case=SUBSTRING] [--reps=N] "
                    "[--timeout_s=N]\n");
      return 2;
    }
  }
  const absl::Status status = tessera::Main(options);
  if (!status.ok()) {
    absl::FPrintF(stderr, "%s\n", status.ToString());
    return 1;
  }
  return 0;
}
