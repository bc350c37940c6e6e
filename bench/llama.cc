// End-to-end LLaMA throughput of the runner (runner/llama_runner.h) on a
// random-weight model written to a temporary GGUF, its matrices in F16,
// Q8_0, Q4_0 and Q4_K (also Q5_K and Q6_K on request; norms F32), the same
// values for every type. For each
// type, the modes of --modes (default local,tp,remote):
//   - local: one CPU device with 2 threads;
//   - tp 2:  a meta device over two 1-thread CPU devices (heads and FFN
//            split by LlamaSplitPolicy, collectives through the
//            HostCommunicator), a third CPU device as the fallback;
//   - remote: a tesserad started here as its own process
//            (--devices=cpu --threads=2), weights uploaded over gRPC;
//   - tp-daemons: tensor parallel across two tesserads started here
//            (--devices=cpu --threads=1 each): a meta device in this
//            process over their cpu0s, split as tp 2, its collectives
//            through this process (HostCommunicator staging the members'
//            tensors over gRPC), a local CPU device as the fallback;
//   - gpu:   the first GPU (a CPU device with 2 threads as the fallback);
//            its limit is the GPU's device-to-device copy bandwidth
//            (bytes read and written per second), measured once through
//            the GPU's stream when the first type's modes are made.
// Each mode processes a prompt of --prompt tokens (micro-batches of
// --ubatch) from an empty cache, then decodes --decode tokens, one
// ProcessGreedy call per token (the next token only: remote reads back the
// daemon's ARGMAX, not the logits), after a warm-up that builds and
// allocates the graphs and an untimed check round that reads every row of
// logits (Process). The modes of a type are loaded together; in each
// of --rounds timed rounds they take turns token by token (decode step i of
// every mode before step i + 1), so that they see the same machine load;
// rows give the medians over the rounds.
// Remote rows add the daemon's cost per decoded token (remote ms/token
// minus local ms/token).
//
// The limit, measured in the same run: decoding one token reads every
// weight once (token_embd only one row) plus the KV cache's positions in
// use (the decode graph attends over the cache's whole capacity, --ctx,
// under a mask, and the CPU's FLASH_ATTN_EXT reads only the positions the
// mask leaves; the gpu mode reads them all), so it cannot beat
// streaming-read bandwidth / those bytes, counted over the decode steps'
// mean position.
// Bandwidth: two threads summing a buffer much larger than the caches
// (prefetching as the kernels do). The CPU modes' limit is a pass over 256
// MiB after every decode step of the timed rounds (interleaved with the
// modes' steps, GB/s over the round, median over rounds): on a VM whose
// bandwidth moves between minutes, a read at another time would hold the
// decode against another machine. A 1 GiB read before and after the table
// (best of 5) shows the drift. tp reads its mirrored weights (norms,
// output) on both members, and its limit counts them twice.
//
// Correctness: the first mode (the reference) decodes greedily; the others
// are fed its tokens (teacher-forced), and their argmax of the prompt's
// last row and of each decode step (check round) is compared with the
// reference's, with the largest logit error relative to the row's largest
// logit. Where an argmax differs, the reference's gap between its two best
// logits is printed next to the error.
//
// Collectives of tp: the runner and the meta device time none (MetaStream
// only counts the last graph's collectives, and the runner keeps its
// streams private). The benchmark hands the meta device a Communicator that
// passes every call to the HostCommunicator and notes it, then times the
// same sequence of collectives per decode token on idle members: an
// estimate of their cost apart from the waiting for the slower member.
//
//   bazel run -c opt //bench:llama [-- --layers=N --dim=N --ff=N --heads=N
//       --kv_heads=N --vocab=N --prompt=N --decode=N --ctx=N --ubatch=N
//       --rounds=N
//       --types=f16,q8_0,q4_0,q4_k --modes=local,tp,remote,tp-daemons,gpu
//       --cache_type=f16|f32|bf16|q8_0|q4_0|q4_1|q5_0|q5_1 --tesserad=PATH
//       --simd=scalar|avx2|avx512|avx512bf16|amx]
//
// --ctx is the cache's capacity (default and least: prompt + decode).
// --simd caps the local mode's SIMD level (default: the best this CPU
// has), to compare levels on one machine.
//
// A LLaMA-3.2-1B-like shape: --layers=16 --dim=2048 --ff=8192 --heads=32
// --kv_heads=8 --vocab=32000 (1.1 B parameters; the vocabulary is smaller
// than 3.2's 128256).

#include "model/llama.h"

#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/assembly/device_spec.h"
#include "backend/comm/communicator.h"
#include "backend/comm/host_communicator.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/host_pages.h"
#include "backend/cpu/simd_level.h"
#include "backend/meta/llama_policy.h"
#include "backend/meta/meta_device.h"
#include "backend/registry.h"
#include "base/status_macros.h"
#include "bench/counting_communicator.h"
#include "bench/stream_read.h"
#include "client/client.h"
#include "client/remote_device.h"
#include "graph/context.h"
#include "graph/op_types.h"
#include "graph/type.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"
#include "model/gguf_writer.h"
#include "runner/llama_runner.h"
#include "server/operations/process_tuning.h"
#include "spdlog/spdlog.h"
#include "tests/integration/daemon_process.h"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Config {
  int64_t layers = 8;
  int64_t dim = 1024;
  int64_t ff = 2816;
  int64_t heads = 16;
  int64_t kv_heads = 4;
  int64_t vocab = 8192;
  int prompt = 128;
  int decode = 32;
  int64_t ctx = 0;  // the cache's capacity; 0: prompt + decode
  int64_t ubatch = 32;
  int rounds = 5;
  std::vector<std::string> types = {"f16", "q8_0", "q4_0", "q4_k"};
  std::vector<std::string> modes = {"local", "tp", "remote"};
  Type cache_type = Type::kF16;
  std::string tesserad;  // empty: the runfiles copy (or $TESSERAD)
  SimdLevel simd = DetectSimdLevel();  // the local mode's highest level
};

int64_t Capacity(const Config& c) {
  return c.ctx > 0 ? c.ctx : c.prompt + c.decode;
}

int64_t ParameterCount(const Config& c) {
  const int64_t kv = c.dim / c.heads * c.kv_heads;
  const int64_t per_layer =
      2 * c.dim * c.dim + 2 * c.dim * kv + 3 * c.dim * c.ff + 2 * c.dim;
  return c.layers * per_layer + 2 * c.vocab * c.dim + c.dim;
}

// ggml type id of a --types name: f16, bf16 or a quantized type's name in
// lower case ("q8_0", "q4_k", ...).
absl::StatusOr<int32_t> GgmlTypeByName(const std::string& name) {
  for (int32_t i = 0; i < kTypeCount; ++i) {
    const Type type = static_cast<Type>(i);
    if ((type == Type::kF16 || type == Type::kBF16 ||
         Traits(type).is_quantized) &&
        absl::AsciiStrToLower(std::string(TypeName(type))) == name) {
      return GgmlTypeFromTessera(type);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown type \"", name,
                   "\" (f16, bf16 or a quantized type: q8_0, q4_0, "
                   "q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k)"));
}

// Uniform values of variance scale^2 from a splitmix64 stream seeded by
// `seed`: cheap enough for a billion weights, and the same for every type.
void RandomValues(uint64_t seed, float scale, float offset,
                  absl::Span<float> out) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  const float k = scale * std::sqrt(3.0f) / 2147483648.0f;
  for (float& v : out) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v = offset + k * static_cast<float>(static_cast<int32_t>(z >> 32));
  }
}

// Runs fn(begin, end) over [0, n) in two halves on two threads.
template <typename Fn>
void TwoThreads(int64_t n, Fn fn) {
  const int64_t half = n / 2;
  std::thread other([&] { fn(half, n); });
  fn(0, half);
  other.join();
}

// Writes the model with matrices of ggml type `matrix_type` to `path`.
absl::Status WriteModel(const Config& c, int32_t matrix_type,
                        const std::string& path) {
  GgufWriter w;
  TESSERA_RETURN_IF_ERROR(
      w.AddKv("general.architecture", std::string("llama")));
  TESSERA_RETURN_IF_ERROR(
      w.AddKv("llama.block_count", static_cast<uint32_t>(c.layers)));
  TESSERA_RETURN_IF_ERROR(
      w.AddKv("llama.embedding_length", static_cast<uint32_t>(c.dim)));
  TESSERA_RETURN_IF_ERROR(
      w.AddKv("llama.feed_forward_length", static_cast<uint32_t>(c.ff)));
  TESSERA_RETURN_IF_ERROR(
      w.AddKv("llama.attention.head_count", static_cast<uint32_t>(c.heads)));
  TESSERA_RETURN_IF_ERROR(w.AddKv("llama.attention.head_count_kv",
                                  static_cast<uint32_t>(c.kv_heads)));
  TESSERA_RETURN_IF_ERROR(w.AddKv("llama.rope.freq_base", 10000.0f));
  TESSERA_RETURN_IF_ERROR(
      w.AddKv("llama.attention.layer_norm_rms_epsilon", 1e-5f));
  TESSERA_RETURN_IF_ERROR(w.AddKv("llama.context_length", uint32_t{4096}));

  TESSERA_ASSIGN_OR_RETURN(const Type matrix, TesseraTypeFromGgml(matrix_type));
  uint64_t seed = 0;
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  auto tensor = [&](const std::string& name, int64_t ne0, int64_t ne1,
                    float scale, float offset, bool is_matrix) {
    ++seed;
    values.resize(ne0 * ne1);
    const Type type = is_matrix ? matrix : Type::kF32;
    bytes.resize(RowSize(type, ne0) * ne1);
    TwoThreads(ne1, [&](int64_t begin, int64_t end) {
      float* v = values.data() + begin * ne0;
      for (int64_t row = begin; row < end; ++row, v += ne0) {
        RandomValues(seed * 1000003 + row, scale, offset,
                     absl::MakeSpan(v, ne0));
        RowFromFloat(type, v, bytes.data() + row * RowSize(type, ne0), ne0);
      }
    });
    const int32_t ggml = is_matrix ? matrix_type : kGgmlF32;
    if (ne1 == 1) return w.AddTensor(name, ggml, {ne0}, bytes);
    return w.AddTensor(name, ggml, {ne0, ne1}, bytes);
  };
  const float in_dim = 1.0f / std::sqrt(static_cast<float>(c.dim));
  const int64_t kv = c.dim / c.heads * c.kv_heads;
  TESSERA_RETURN_IF_ERROR(
      tensor("token_embd.weight", c.dim, c.vocab, 1.0f, 0.0f, true));
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    TESSERA_RETURN_IF_ERROR(
        tensor(p + "attn_norm.weight", c.dim, 1, 0.1f, 1.0f, false));
    TESSERA_RETURN_IF_ERROR(
        tensor(p + "attn_q.weight", c.dim, c.dim, in_dim, 0.0f, true));
    TESSERA_RETURN_IF_ERROR(
        tensor(p + "attn_k.weight", c.dim, kv, in_dim, 0.0f, true));
    TESSERA_RETURN_IF_ERROR(
        tensor(p + "attn_v.weight", c.dim, kv, in_dim, 0.0f, true));
    TESSERA_RETURN_IF_ERROR(
        tensor(p + "attn_output.weight", c.dim, c.dim, in_dim, 0.0f, true));
    TESSERA_RETURN_IF_ERROR(
        tensor(p + "ffn_norm.weight", c.dim, 1, 0.1f, 1.0f, false));
    TESSERA_RETURN_IF_ERROR(
        tensor(p + "ffn_gate.weight", c.dim, c.ff, in_dim, 0.0f, true));
    TESSERA_RETURN_IF_ERROR(
        tensor(p + "ffn_up.weight", c.dim, c.ff, in_dim, 0.0f, true));
    TESSERA_RETURN_IF_ERROR(tensor(p + "ffn_down.weight", c.ff, c.dim,
                                   1.0f / std::sqrt(static_cast<float>(c.ff)),
                                   0.0f, true));
  }
  TESSERA_RETURN_IF_ERROR(
      tensor("output_norm.weight", c.dim, 1, 0.1f, 1.0f, false));
  TESSERA_RETURN_IF_ERROR(
      tensor("output.weight", c.dim, c.vocab, 2.0f * in_dim, 0.0f, true));
  return w.WriteToFile(path);
}

// `threads` threads summing disjoint parts of a buffer of `bytes` (touched
// first, on the pages the CPU device's buffers have) by StreamSum, the
// passes alternating its kinds; the bandwidth is the faster kind's.
class StreamRead {
 public:
  StreamRead(size_t bytes, int threads)
      : n_(bytes / sizeof(uint64_t)),
        threads_(threads),
        pages_(AllocHostPages(n_ * sizeof(uint64_t))),
        sums_(threads) {
    uint64_t* buffer = static_cast<uint64_t*>(pages_.get());
    EachThread([&](int t, size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) buffer[i] = i;
    });
  }

  size_t bytes() const { return n_ * sizeof(uint64_t); }

  // One pass over the buffer by the next kind of read, timed. A pass whose
  // sums come out wrong (the reads were not really made) takes infinitely
  // long.
  void Pass() {
    const size_t k = passes_ % kKinds;
    const uint64_t* x = static_cast<const uint64_t*>(pages_.get());
    const auto start = Clock::now();
    EachThread([&](int t, size_t begin, size_t end) {
      sums_[t] = StreamSum(kReadKinds[k], x + begin, end - begin);
    });
    double seconds = SecondsSince(start);
    // n (n - 1) / 2 whatever the split.
    uint64_t total = 0;
    for (uint64_t s : sums_) total += s;
    if (total != static_cast<uint64_t>(n_) * (n_ - 1) / 2) {
      seconds = std::numeric_limits<double>::infinity();
    }
    ++passes_;
    kinds_[k].passes += 1;
    kinds_[k].seconds += seconds;
    kinds_[k].best = std::min(kinds_[k].best, seconds);
  }
  // Forgets the passes made so far.
  void Reset() {
    passes_ = 0;
    for (Kind& kind : kinds_) kind = Kind();
  }
  // GB/s of the faster kind over all its passes since Reset.
  double MeanGBps() const {
    double best = 0;
    for (const Kind& kind : kinds_) {
      if (kind.passes == 0) continue;
      best = std::max(best, kind.passes * bytes() / kind.seconds / 1e9);
    }
    return best;
  }
  // GB/s of the fastest pass since Reset.
  double BestGBps() const {
    double best = 0;
    for (const Kind& kind : kinds_) {
      best = std::max(best, bytes() / kind.best / 1e9);
    }
    return best;
  }

 private:
  // fn(t, begin, end) on thread t of threads_, for its part of the buffer.
  template <typename Fn>
  void EachThread(Fn fn) {
    auto part = [&](int t) {
      fn(t, n_ * t / threads_, n_ * (t + 1) / threads_);
    };
    std::vector<std::thread> team;
    for (int t = 1; t < threads_; ++t) team.emplace_back(part, t);
    part(0);
    for (std::thread& th : team) th.join();
  }

  static constexpr size_t kKinds = std::size(kReadKinds);
  struct Kind {
    int passes = 0;
    double seconds = 0;
    double best = std::numeric_limits<double>::infinity();
  };

  size_t n_;
  int threads_;
  HostPages pages_;
  std::vector<uint64_t> sums_;
  size_t passes_ = 0;
  Kind kinds_[kKinds];
};

// GB/s of the fastest of `passes` passes of a StreamRead of `bytes`.
double StreamReadGBps(size_t bytes, int threads, int passes) {
  StreamRead read(bytes, threads);
  for (int p = 0; p < passes; ++p) read.Pass();
  return read.BestGBps();
}

// Bytes one decode token reads: every weight once (token_embd one row),
// mirrored ones `mirror_copies` times (tp: each member reads its own), and
// the KV cache (of `cache_type`) over `positions`.
absl::StatusOr<uint64_t> DecodeBytes(const GgufFile& file, Type cache_type,
                                     int64_t positions,
                                     const SplitPolicy* policy,
                                     int mirror_copies) {
  TESSERA_ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfig::FromGguf(file));
  Context ctx;
  TESSERA_ASSIGN_OR_RETURN(LlamaWeights weights,
                           LlamaWeights::FromGguf(file, config, ctx));
  uint64_t bytes = 0;
  for (const Tensor* t : weights.all) {
    uint64_t b =
        t == weights.token_embd ? RowSize(t->type, t->ne[0]) : t->NumBytes();
    if (policy != nullptr && !(*policy)(*t).is_split()) b *= mirror_copies;
    bytes += b;
  }
  bytes += static_cast<uint64_t>(config.n_layer) * 2 * positions *
           RowSize(cache_type, config.n_embd_kv());
  return bytes;
}

std::vector<int32_t> Prompt(const Config& c) {
  std::vector<int32_t> p;
  for (int i = 0; i < c.prompt; ++i) {
    p.push_back(static_cast<int32_t>((i * 37 + 11) % c.vocab));
  }
  return p;
}

LlamaRunnerOptions RunnerOptions(const Config& c) {
  LlamaRunnerOptions o;
  o.n_ctx = Capacity(c);
  o.n_ubatch = c.ubatch;
  o.cache_type = c.cache_type;
  return o;
}

absl::StatusOr<LlamaSplitOptions> SplitOptions(const GgufFile& file) {
  TESSERA_ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfig::FromGguf(file));
  Context ctx;
  TESSERA_ASSIGN_OR_RETURN(LlamaWeights weights,
                           LlamaWeights::FromGguf(file, config, ctx));
  return LlamaSplitOptions{
      .head_dim = config.head_dim(),
      .gqa_ratio = config.n_head / config.n_head_kv,
      .ffn_granularity = Traits(weights.layers[0].ffn_down->type).block_size};
}

// CPU seconds (user + system) this process has used.
double SelfCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// CPU seconds process `pid` has used (/proc/PID/stat utime + stime); 0 for
// pid 0 or when unreadable.
double ProcessCpuSeconds(pid_t pid) {
  if (pid == 0) return 0;
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) in parentheses:
  // state is field 3, utime 14, stime 15.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  const std::vector<std::string> fields =
      absl::StrSplit(stat.substr(paren + 2), ' ');
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return 0;
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

// One runner with what it runs on (members in destruction order: the
// runner first, then its devices and communicators).
struct Mode {
  std::string name;
  bool remote = false;
  std::unique_ptr<Registry> registry;
  // tp-daemons: the daemons, this process's sessions and their devices.
  std::vector<std::unique_ptr<testing::DaemonProcess>> daemons;
  std::vector<std::unique_ptr<client::Client>> clients;
  std::vector<std::unique_ptr<client::RemoteDevice>> remotes;
  std::unique_ptr<HostCommunicator> host;
  std::unique_ptr<CountingCommunicator> counting;  // tp
  std::unique_ptr<MetaDevice> meta;
  std::unique_ptr<LlamaRunner> runner;
  double load_s = 0;
  uint64_t bytes_per_token = 0;
  double limit_gbps = 0;         // the bandwidth its decode is held against
  std::vector<double> prompt_s;  // per round
  std::vector<double> decode_s;
  // The check round: the argmax of the prompt's last row and of each
  // decode step, and every row of logits (prompt rows, then one per decode
  // step).
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  // Tokens of the timed rounds (ProcessGreedy) unequal to the check
  // round's.
  int64_t greedy_differ = 0;
  // tp: collectives of the check round.
  int64_t prompt_collectives = 0;
  std::vector<CountingCommunicator::Call> token_collectives;
  double replay_us = 0;
  // CPU seconds spent during the decode steps, timed rounds: by this process,
  // and by the daemon (remote).
  double decode_cpu_self_s = 0;
  double decode_cpu_daemon_s = 0;
  pid_t daemon_pid = 0;  // remote
};

absl::Status MakeLocal(const GgufFile& file, const Config& c, Mode& m) {
  m.registry = std::make_unique<Registry>();
  auto device = std::make_unique<CpuDevice>(
      CpuDeviceOptions{.name = "cpu0", .n_threads = 2, .max_simd = c.simd});
  m.name = absl::StrFormat("local, 1 CPU x 2 threads, %s",
                           SimdLevelName(device->simd_level()));
  TESSERA_RETURN_IF_ERROR(m.registry->Add(std::move(device)));
  const auto start = Clock::now();
  TESSERA_ASSIGN_OR_RETURN(
      m.runner, LlamaRunner::CreateLocal(file, {m.registry->devices()[0]},
                                         RunnerOptions(c)));
  m.load_s = SecondsSince(start);
  return absl::OkStatus();
}

absl::Status MakeTp(const GgufFile& file, const Config& c, Mode& m) {
  m.name = "tp 2, 2 CPUs x 1 thread";
  // Members cpu0 and cpu1, the fallback cpu2; one thread each.
  m.registry = std::make_unique<Registry>();
  TESSERA_RETURN_IF_ERROR(AddDevices("cpu:3", 1, *m.registry));
  const std::vector<Device*> members = {m.registry->devices()[0],
                                        m.registry->devices()[1]};
  TESSERA_ASSIGN_OR_RETURN(m.host, HostCommunicator::Create(members));
  m.counting = std::make_unique<CountingCommunicator>(*m.host);
  TESSERA_ASSIGN_OR_RETURN(LlamaSplitOptions split, SplitOptions(file));
  TESSERA_ASSIGN_OR_RETURN(m.meta,
                           MetaDevice::Create("tp", members, *m.counting,
                                              LlamaSplitPolicy(2, split)));
  const auto start = Clock::now();
  TESSERA_ASSIGN_OR_RETURN(
      m.runner, LlamaRunner::CreateLocal(file, {m.meta.get()}, RunnerOptions(c),
                                         m.registry->devices()[2]));
  m.load_s = SecondsSince(start);
  return absl::OkStatus();
}

absl::Status MakeTpDaemons(const GgufFile& file, const Config& c, Mode& m) {
  m.name = "tp 2 over 2 daemons x 1 thr";
  std::vector<Device*> members;
  for (int i = 0; i < 2; ++i) {
    TESSERA_ASSIGN_OR_RETURN(
        m.daemons.emplace_back(),
        testing::DaemonProcess::Start(
            {"--devices=cpu", "--threads=1", "--log_level=warn"}));
    TESSERA_ASSIGN_OR_RETURN(
        m.clients.emplace_back(),
        client::Client::Connect(m.daemons.back()->address()));
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<std::unique_ptr<client::RemoteDevice>> devices,
        client::RemoteDevice::ListAll(*m.clients.back()));
    m.remotes.push_back(std::move(devices.front()));
    members.push_back(m.remotes.back().get());
  }
  m.registry = std::make_unique<Registry>();
  TESSERA_RETURN_IF_ERROR(AddDevices("cpu", 1, *m.registry));
  TESSERA_ASSIGN_OR_RETURN(m.host, HostCommunicator::Create(members));
  TESSERA_ASSIGN_OR_RETURN(LlamaSplitOptions split, SplitOptions(file));
  TESSERA_ASSIGN_OR_RETURN(
      m.meta,
      MetaDevice::Create("tp", members, *m.host, LlamaSplitPolicy(2, split)));
  const auto start = Clock::now();
  TESSERA_ASSIGN_OR_RETURN(
      m.runner, LlamaRunner::CreateLocal(file, {m.meta.get()}, RunnerOptions(c),
                                         m.registry->devices()[0]));
  m.load_s = SecondsSince(start);
  return absl::OkStatus();
}

absl::Status MakeRemote(const GgufFile& file, const Config& c,
                        client::Client& client, pid_t daemon_pid, Mode& m) {
  m.name = "remote tesserad, 2 threads";
  m.remote = true;
  m.daemon_pid = daemon_pid;
  const auto start = Clock::now();
  TESSERA_ASSIGN_OR_RETURN(
      m.runner, LlamaRunner::CreateRemote(file, client, "", RunnerOptions(c)));
  m.load_s = SecondsSince(start);
  return absl::OkStatus();
}

// Device-to-device copy bandwidth of `device` in GB/s, counting the bytes
// read and the bytes written: 512 MiB copied by the device's own stream
// (cudaMemcpyAsync on a GPU), the best of 5 after one untimed copy.
absl::StatusOr<double> DeviceCopyGBps(Device& device) {
  constexpr int64_t kValues = int64_t{128} << 20;
  Context ctx;
  TESSERA_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(Type::kF32, {kValues}));
  TESSERA_ASSIGN_OR_RETURN(Tensor * b, ctx.NewTensor(Type::kF32, {kValues}));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                           AllocTensors(device.buffer_type(), {a, b}));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                           device.CreateStream());
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    const auto start = Clock::now();
    TESSERA_RETURN_IF_ERROR(stream->CopyTensorAsync(*a, *b));
    TESSERA_RETURN_IF_ERROR(stream->Synchronize());
    if (i > 0) best = std::max(best, 2.0 * a->NumBytes() / SecondsSince(start));
  }
  return best / 1e9;
}

// `copy_gbps` is the GPU's copy bandwidth, measured by the first call (0
// until then) and kept for the next types.
absl::Status MakeGpu(const GgufFile& file, const Config& c, Mode& m,
                     double& copy_gbps) {
  m.registry = std::make_unique<Registry>();
  TESSERA_RETURN_IF_ERROR(AddDevices("all", 2, *m.registry));
  Device* gpu = nullptr;
  Device* cpu = nullptr;
  for (Device* device : m.registry->devices()) {
    Device*& slot = device->Props().type == DeviceType::kGpu ? gpu : cpu;
    if (slot == nullptr) slot = device;
  }
  if (gpu == nullptr) return absl::NotFoundError("no GPU found");
  m.name = absl::StrCat("local, ", gpu->name());
  if (copy_gbps == 0) {
    TESSERA_ASSIGN_OR_RETURN(copy_gbps, DeviceCopyGBps(*gpu));
  }
  m.limit_gbps = copy_gbps;
  const auto start = Clock::now();
  TESSERA_ASSIGN_OR_RETURN(
      m.runner, LlamaRunner::CreateLocal(file, {gpu}, RunnerOptions(c), cpu));
  m.load_s = SecondsSince(start);
  return absl::OkStatus();
}

// Builds and allocates every graph a round uses (the prompt's micro-batch
// sizes and the decode graph).
absl::Status WarmUp(LlamaRunner& runner, const Config& c) {
  const std::vector<int32_t> prompt = Prompt(c);
  const absl::Span<const int32_t> all(prompt);
  runner.Reset();
  TESSERA_RETURN_IF_ERROR(
      runner.Process(all.subspan(0, std::min<int64_t>(c.prompt, c.ubatch)))
          .status());
  if (c.prompt > c.ubatch && c.prompt % c.ubatch != 0) {
    TESSERA_RETURN_IF_ERROR(
        runner.Process(all.subspan(0, c.prompt % c.ubatch)).status());
  }
  TESSERA_RETURN_IF_ERROR(runner.Process(all.subspan(0, 1)).status());
  runner.Reset();
  return absl::OkStatus();
}

// Prefixes `status` with what was being measured.
absl::Status In(const std::string& what, absl::Status status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.message()));
}

// The check round of `m` (untimed): the prompt from an empty sequence,
// then c.decode steps, each fed `forced[i]` (local's greedy tokens) or,
// with `forced` empty, its own greedy token; keeps every row of logits
// (Process), the argmax of each and, for tp, the collectives.
absl::Status CheckRound(Mode& m, const Config& c,
                        absl::Span<const int32_t> forced) {
  LlamaRunner& runner = *m.runner;
  runner.Reset();
  if (m.counting != nullptr) m.counting->Take();
  TESSERA_ASSIGN_OR_RETURN(m.logits, runner.Process(Prompt(c)));
  const int64_t n_vocab = runner.config().n_vocab;
  m.tokens = {ArgmaxToken(
      absl::MakeConstSpan(m.logits).subspan(m.logits.size() - n_vocab))};
  if (m.counting != nullptr) {
    m.prompt_collectives = static_cast<int64_t>(m.counting->Take().size());
  }
  for (int i = 0; i < c.decode; ++i) {
    const int32_t next = forced.empty() ? m.tokens.back() : forced[i];
    TESSERA_ASSIGN_OR_RETURN(std::vector<float> logits, runner.Process({next}));
    m.tokens.push_back(ArgmaxToken(logits));
    m.logits.insert(m.logits.end(), logits.begin(), logits.end());
  }
  if (m.counting != nullptr) {
    const std::vector<CountingCommunicator::Call> calls = m.counting->Take();
    const size_t per_token =
        calls.size() % c.decode == 0 ? calls.size() / c.decode : calls.size();
    m.token_collectives.assign(calls.begin(), calls.begin() + per_token);
  }
  return absl::OkStatus();
}

// One timed round of every mode, decoding as a greedy caller does
// (ProcessGreedy: remote reads back only the argmax): each mode's prompt in
// turn, then decode step i of every mode, then a pass of `read`, before
// step i + 1, so that the modes' times per token are taken side by side
// under the same machine load. Every mode is fed `forced` (local's greedy
// tokens) and counts the tokens that differ from its check round's.
// Returns the read's GB/s over the round: the bandwidth of the same minutes
// as the decode steps, on a machine whose bandwidth moves from minute to
// minute.
//
// Each step starts after kSettle, with the threads of the mode before it
// asleep: a stream's threads poll for more work for a while after their
// last (backend/spin.h), and a step begun meanwhile shared its cores with
// them (on 2 vCPUs, remote decode lost 4% to local so, this process
// spending 1.8 ms of CPU per remote token against 0.3 without the local
// mode beside it).
constexpr absl::Duration kSettle = absl::Milliseconds(2);
absl::StatusOr<double> TimedRound(absl::Span<Mode> modes, const Config& c,
                                  absl::Span<const int32_t> forced,
                                  StreamRead& read) {
  for (Mode& m : modes) {
    m.runner->Reset();
    if (m.counting != nullptr) m.counting->Take();
    const auto start = Clock::now();
    const absl::StatusOr<int32_t> token = m.runner->ProcessGreedy(Prompt(c));
    if (!token.ok()) return In(m.name, token.status());
    m.prompt_s.push_back(SecondsSince(start));
    m.greedy_differ += *token != m.tokens[0];
    m.decode_s.push_back(0);
  }
  read.Reset();
  for (int i = 0; i < c.decode; ++i) {
    for (Mode& m : modes) {
      absl::SleepFor(kSettle);
      const double self_before = SelfCpuSeconds();
      const double daemon_before = ProcessCpuSeconds(m.daemon_pid);
      const auto start = Clock::now();
      const absl::StatusOr<int32_t> token =
          m.runner->ProcessGreedy({forced[i]});
      if (!token.ok()) return In(m.name, token.status());
      m.decode_s.back() += SecondsSince(start);
      m.decode_cpu_self_s += SelfCpuSeconds() - self_before;
      m.decode_cpu_daemon_s += ProcessCpuSeconds(m.daemon_pid) - daemon_before;
      m.greedy_differ += *token != m.tokens[i + 1];
    }
    read.Pass();
  }
  return read.MeanGBps();
}

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// How `m`'s round-0 logits compare with local's: the largest error per row
// relative to the row's largest |logit| (over the prompt rows and over the
// decode rows), and the rows whose argmax differs, each with local's gap
// between its two largest logits on the same scale.
struct Agreement {
  double prompt_err = 0;
  double decode_err = 0;
  int equal = 0;
  int compared = 0;
  std::vector<std::string> differences;
};

Agreement Compare(const Mode& m, const Mode& local, const Config& c) {
  Agreement a;
  const int64_t v = c.vocab;
  const int64_t rows = static_cast<int64_t>(local.logits.size()) / v;
  std::vector<double> errors(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = m.logits.data() + r * v;
    const float* ref = local.logits.data() + r * v;
    double err = 0, scale = 0;
    for (int64_t i = 0; i < v; ++i) {
      err = std::max(err, std::fabs(double{x[i]} - ref[i]));
      scale = std::max(scale, std::fabs(double{ref[i]}));
    }
    errors[r] = err / scale;
    if (r < c.prompt) {
      a.prompt_err = std::max(a.prompt_err, errors[r]);
    } else {
      a.decode_err = std::max(a.decode_err, errors[r]);
    }
  }
  a.compared = static_cast<int>(local.tokens.size());
  for (int t = 0; t < a.compared; ++t) {
    if (m.tokens[t] == local.tokens[t]) {
      ++a.equal;
      continue;
    }
    // Token t comes from logits row prompt - 1 + t.
    const int64_t r = c.prompt - 1 + t;
    std::vector<float> row(local.logits.begin() + r * v,
                           local.logits.begin() + (r + 1) * v);
    double scale = 0;
    for (float x : row) scale = std::max(scale, std::fabs(double{x}));
    std::partial_sort(row.begin(), row.begin() + 2, row.end(),
                      std::greater<float>());
    a.differences.push_back(absl::StrFormat(
        "token %d: %d vs local %d, local's top-2 gap %.2g, error %.2g", t,
        m.tokens[t], local.tokens[t], (row[0] - row[1]) / scale, errors[r]));
  }
  return a;
}

absl::Status Main(const Config& c) {
  const int64_t kv = c.dim / c.heads * c.kv_heads;
  absl::PrintF(
      "LLaMA shape: %d layers, dim %d, FFN %d, %d heads / %d KV heads (head "
      "dim %d, KV dim %d), vocab %d, untied output: %.1f M parameters\n",
      c.layers, c.dim, c.ff, c.heads, c.kv_heads, c.dim / c.heads, kv, c.vocab,
      ParameterCount(c) / 1e6);
  absl::PrintF(
      "prompt %d tokens (micro-batches of %d), then %d decode tokens; KV "
      "cache %s, capacity %d; %d rounds per mode, interleaved, medians; %d "
      "hardware threads\n",
      c.prompt, c.ubatch, c.decode, TypeName(c.cache_type),
      Capacity(c), c.rounds,
      static_cast<int>(std::thread::hardware_concurrency()));

  const auto selected = [&](std::string_view mode) {
    return std::find(c.modes.begin(), c.modes.end(), mode) != c.modes.end();
  };
  std::unique_ptr<testing::DaemonProcess> daemon;
  std::unique_ptr<client::Client> client;
  if (!c.tesserad.empty()) setenv("TESSERAD", c.tesserad.c_str(), 1);
  if (selected("remote")) {
    TESSERA_ASSIGN_OR_RETURN(
        daemon, testing::DaemonProcess::Start(
                    {"--devices=cpu", "--threads=2", "--log_level=warn"}));
    TESSERA_ASSIGN_OR_RETURN(client,
                             client::Client::Connect(daemon->address()));
    TESSERA_ASSIGN_OR_RETURN(const std::string tesserad,
                             testing::TesseradPath());
    absl::PrintF("tesserad: %s (pid %d, %s, --devices=cpu --threads=2)\n",
                 tesserad, daemon->pid(), daemon->address());
  }

  constexpr size_t kStreamBytes = size_t{1} << 30;
  const double bw = StreamReadGBps(kStreamBytes, 2, 6);
  absl::PrintF(
      "limit: streaming read, 2 threads summing a buffer, each its half, as "
      "four streams or one, alternately, the faster kind counting: of 256 "
      "MiB after every decode step of the timed rounds (the limit of the CPU "
      "modes' decode, median over rounds); of 1 GiB before the table, best "
      "of 6: %.2f GB/s\n\n",
      bw);
  StreamRead interleaved_read(size_t{256} << 20, 2);

  std::string dir = "/tmp/tessera_bench_llama.XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_dir{dir};

  absl::PrintF("%-5s %-27s %6s %10s %10s %9s %8s %9s %7s %9s %13s %17s\n",
               "type", "mode", "load s", "prompt t/s", "decode t/s", "ms/token",
               "MB/token", "limit t/s", "/limit", "daemon us", "argmax=local",
               "rel err pr/dec");
  std::vector<std::string> footnotes;
  double gpu_copy_gbps = 0;  // measured with the first gpu mode
  for (const std::string& name : c.types) {
    TESSERA_ASSIGN_OR_RETURN(const int32_t ggml, GgmlTypeByName(name));
    const std::string path = absl::StrCat(dir, "/", name, ".gguf");
    const auto start = Clock::now();
    TESSERA_RETURN_IF_ERROR(In(name, WriteModel(c, ggml, path)));
    const double write_s = SecondsSince(start);
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file,
                             GgufFile::Open(path));
    // Cache positions a decode step reads, on average over the steps.
    const int64_t in_use = c.prompt + (c.decode + 1) / 2;
    TESSERA_ASSIGN_OR_RETURN(LlamaSplitOptions split, SplitOptions(*file));
    const SplitPolicy policy = LlamaSplitPolicy(2, split);

    std::vector<Mode> modes(c.modes.size());
    Mode* tp = nullptr;
    Mode* remote = nullptr;
    for (size_t i = 0; i < c.modes.size(); ++i) {
      Mode& m = modes[i];
      const std::string& mode = c.modes[i];
      if (mode == "local") {
        TESSERA_RETURN_IF_ERROR(In(name + " local", MakeLocal(*file, c, m)));
      } else if (mode == "tp") {
        TESSERA_RETURN_IF_ERROR(In(name + " tp 2", MakeTp(*file, c, m)));
        TESSERA_ASSIGN_OR_RETURN(
            m.bytes_per_token,
            DecodeBytes(*file, c.cache_type, in_use, &policy, 2));
        tp = &m;
      } else if (mode == "remote") {
        TESSERA_RETURN_IF_ERROR(In(
            name + " remote", MakeRemote(*file, c, *client, daemon->pid(), m)));
        remote = &m;
      } else if (mode == "tp-daemons") {
        TESSERA_RETURN_IF_ERROR(
            In(name + " tp-daemons", MakeTpDaemons(*file, c, m)));
        TESSERA_ASSIGN_OR_RETURN(
            m.bytes_per_token,
            DecodeBytes(*file, c.cache_type, in_use, &policy, 2));
      } else {
        TESSERA_RETURN_IF_ERROR(
            In(name + " gpu", MakeGpu(*file, c, m, gpu_copy_gbps)));
      }
      if (m.bytes_per_token == 0) {
        TESSERA_ASSIGN_OR_RETURN(
            m.bytes_per_token,
            DecodeBytes(*file, c.cache_type,
                        mode == "gpu" ? Capacity(c) : in_use, nullptr, 1));
      }
    }
    Mode& local = modes[0];  // the reference
    for (Mode& m : modes) {
      TESSERA_RETURN_IF_ERROR(In(name + " " + m.name, WarmUp(*m.runner, c)));
    }
    // The check round (the reference's greedy tokens first), then the timed
    // ones.
    for (Mode& m : modes) {
      TESSERA_RETURN_IF_ERROR(In(
          name + " " + m.name,
          CheckRound(
              m, c,
              &m == &local
                  ? absl::Span<const int32_t>()
                  : absl::MakeConstSpan(local.tokens).subspan(0, c.decode))));
    }
    std::vector<double> read_gbps;  // per round
    for (int round = 0; round < c.rounds; ++round) {
      absl::StatusOr<double> gbps =
          TimedRound(absl::MakeSpan(modes), c,
                     absl::MakeConstSpan(local.tokens).subspan(0, c.decode),
                     interleaved_read);
      if (!gbps.ok()) return In(name, gbps.status());
      read_gbps.push_back(*gbps);
    }
    const double interleaved_gbps = Median(read_gbps);
    for (Mode& m : modes) {
      if (m.limit_gbps == 0) m.limit_gbps = interleaved_gbps;
    }
    footnotes.push_back(absl::StrFormat(
        "%s limit (CPU modes): the streaming read interleaved with the "
        "decode steps, %.2f GB/s",
        name, interleaved_gbps));
    if (tp != nullptr) {
      TESSERA_ASSIGN_OR_RETURN(
          tp->replay_us, ReplayMicros(*tp->host, tp->token_collectives, 200));
    }

    const double local_decode = Median(local.decode_s);
    for (Mode& m : modes) {
      const double prompt_s = Median(m.prompt_s);
      const double decode_s = Median(m.decode_s);
      const double decode_tps = c.decode / decode_s;
      const double limit_tps = m.limit_gbps * 1e9 / m.bytes_per_token;
      std::string agree = "(reference)", err = "-";
      if (m.greedy_differ != 0) {
        footnotes.push_back(absl::StrFormat(
            "%s %s: %d timed-round tokens (ProcessGreedy) differ from its "
            "check round's argmax",
            name, m.name, m.greedy_differ));
      }
      if (&m != &local) {
        const Agreement a = Compare(m, local, c);
        agree =
            absl::StrFormat("%s %d/%d", a.equal == a.compared ? "yes" : "NO",
                            a.equal, a.compared);
        err = absl::StrFormat("%.1e/%.1e", a.prompt_err, a.decode_err);
        for (const std::string& d : a.differences) {
          footnotes.push_back(absl::StrCat(name, " ", m.name, ": ", d));
        }
      }
      absl::PrintF(
          "%-5s %-27s %6.2f %10.1f %10.2f %9.2f %8.1f %9.2f %7.2f %9s %13s "
          "%17s\n",
          name, m.name, m.load_s, c.prompt / prompt_s, decode_tps,
          1e3 * decode_s / c.decode, m.bytes_per_token / 1e6, limit_tps,
          decode_tps / limit_tps,
          m.remote ? absl::StrFormat("%.0f",
                                     1e6 * (decode_s - local_decode) / c.decode)
                   : "-",
          agree, err);
    }
    if (tp != nullptr) {
      footnotes.push_back(absl::StrFormat(
          "%s tp 2 collectives per decode token: %s; replayed alone %.0f us = "
          "%.1f%% of its decode time per token; per prompt: %d",
          name, Describe(tp->token_collectives), tp->replay_us,
          100.0 * tp->replay_us * 1e-6 / (Median(tp->decode_s) / c.decode),
          tp->prompt_collectives));
    }
    const double tokens = static_cast<double>(c.rounds) * c.decode;
    std::string cpu_ms;
    for (const Mode& m : modes) {
      absl::StrAppendFormat(&cpu_ms, "%s%s %.1f", cpu_ms.empty() ? "" : "; ",
                            m.name, 1e3 * m.decode_cpu_self_s / tokens);
      if (&m == remote) {
        absl::StrAppendFormat(&cpu_ms, " + tesserad %.1f",
                              1e3 * m.decode_cpu_daemon_s / tokens);
      }
      absl::StrAppendFormat(&cpu_ms, " (wall %.1f)",
                            1e3 * Median(m.decode_s) / c.decode);
    }
    footnotes.push_back(
        absl::StrFormat("%s CPU ms per decode token: %s", name, cpu_ms));
    for (const Mode& m : modes) {
      if (m.runner->n_splits() == 0) continue;
      footnotes.push_back(absl::StrFormat(
          "%s %s: the decode graph runs as %d splits, %d inputs copied "
          "between devices",
          name, m.name, m.runner->n_splits(), m.runner->n_inputs_copied()));
    }
    footnotes.push_back(
        absl::StrFormat("%s model file %.1f MB, written in %.1f s", name,
                        std::filesystem::file_size(path) / 1e6, write_s));
    std::fflush(stdout);
  }
  const double bw_after = StreamReadGBps(kStreamBytes, 2, 6);

  absl::PrintF(
      "\nMB/token: bytes one decode token reads (the weights, token_embd one "
      "row, the KV cache's positions in use at the decode steps' mean "
      "position, at capacity for gpu; tp counts its mirrored weights once "
      "per member); limit t/s = bandwidth / MB/token (the streaming read "
      "interleaved with the decode steps for CPU modes, the device-to-device "
      "copy for gpu); /limit = decode "
      "t/s / limit t/s; daemon us = remote minus the reference's decode time "
      "per token.\n"
      "argmax=local: each mode decodes the reference's (first row's) greedy "
      "tokens (teacher-forced) and its argmax of the prompt's last row and of "
      "each step is compared with the reference's; rel err: max |logit - "
      "reference's| / max |reference's| per row, worst over the prompt rows / "
      "the decode rows.\n"
      "tp collectives: the runner and the meta device time none; they are "
      "counted through a wrapping Communicator, then the same sequence is "
      "replayed on idle members (median of 200).\n"
      "streaming read again after the table: %.2f GB/s (%.2f before)\n\n",
      bw_after, bw);
  for (const std::string& f : footnotes) absl::PrintF("%s\n", f);
  return absl::OkStatus();
}

bool IntFlag(const std::string& arg, const char* name, int64_t min,
             int64_t* value, bool* bad) {
  const std::string prefix = absl::StrCat("--", name, "=");
  if (arg.rfind(prefix, 0) != 0) return false;
  if (!absl::SimpleAtoi(arg.substr(prefix.size()), value) || *value < min) {
    *bad = true;
  }
  return true;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::server::TuneProcess();
  spdlog::set_level(spdlog::level::warn);
  tessera::bench::Config c;
  bool bad = false;
  for (int i = 1; i < argc && !bad; ++i) {
    const std::string arg = argv[i];
    int64_t prompt = c.prompt, decode = c.decode;
    using tessera::bench::IntFlag;
    if (IntFlag(arg, "layers", 1, &c.layers, &bad) ||
        IntFlag(arg, "dim", 32, &c.dim, &bad) ||
        IntFlag(arg, "ff", 32, &c.ff, &bad) ||
        IntFlag(arg, "heads", 1, &c.heads, &bad) ||
        IntFlag(arg, "kv_heads", 1, &c.kv_heads, &bad) ||
        IntFlag(arg, "vocab", 2, &c.vocab, &bad) ||
        IntFlag(arg, "ubatch", 1, &c.ubatch, &bad) ||
        IntFlag(arg, "ctx", 1, &c.ctx, &bad)) {
      continue;
    }
    int64_t rounds = c.rounds;
    if (IntFlag(arg, "rounds", 1, &rounds, &bad)) {
      c.rounds = static_cast<int>(rounds);
    } else if (IntFlag(arg, "prompt", 1, &prompt, &bad)) {
      c.prompt = static_cast<int>(prompt);
    } else if (IntFlag(arg, "decode", 1, &decode, &bad)) {
      c.decode = static_cast<int>(decode);
    } else if (arg.rfind("--types=", 0) == 0) {
      c.types = absl::StrSplit(arg.substr(8), ',', absl::SkipEmpty());
    } else if (arg.rfind("--modes=", 0) == 0) {
      c.modes = absl::StrSplit(arg.substr(8), ',', absl::SkipEmpty());
      bad = c.modes.empty();
      for (size_t m = 0; m < c.modes.size(); ++m) {
        bad |= (c.modes[m] != "local" && c.modes[m] != "tp" &&
                c.modes[m] != "remote" && c.modes[m] != "tp-daemons" &&
                c.modes[m] != "gpu") ||
               std::count(c.modes.begin(), c.modes.end(), c.modes[m]) > 1;
      }
    } else if (arg.rfind("--cache_type=", 0) == 0) {
      const std::optional<tessera::Type> type =
          tessera::TypeNamed(arg.substr(13));
      bad = !type.has_value() || !tessera::IsAttnKvType(*type);
      if (!bad) c.cache_type = *type;
    } else if (arg.rfind("--tesserad=", 0) == 0) {
      c.tesserad = arg.substr(11);
    } else if (arg.rfind("--simd=", 0) == 0) {
      const absl::StatusOr<tessera::SimdLevel> level =
          tessera::ParseSimdLevel(arg.substr(7));
      bad = !level.ok();
      if (!bad) c.simd = *level;
    } else {
      bad = true;
    }
  }
  if (!bad) {
    // The shape's limits. tp 2 needs a KV head per member, and attn_output
    // split in whole head groups of whole blocks (the meta device slices a
    // mirrored quantized weight only at block boundaries).
    bad = c.dim % c.heads != 0 || c.heads % c.kv_heads != 0 ||
          c.kv_heads < 2 || (c.ctx > 0 && c.ctx < c.prompt + c.decode);
    const int64_t head_group = c.dim / c.heads * (c.heads / c.kv_heads);
    for (const std::string& type : c.types) {
      const absl::StatusOr<int32_t> ggml = tessera::bench::GgmlTypeByName(type);
      if (!ggml.ok()) {
        bad = true;
        continue;
      }
      const int64_t block =
          tessera::Traits(*tessera::TesseraTypeFromGgml(*ggml)).block_size;
      bad |= c.dim % block != 0 || c.ff % block != 0 || head_group % block != 0;
    }
  }
  if (bad) {
    absl::FPrintF(
        stderr,
        "usage: llama [--layers=N] [--dim=N] [--ff=N] [--heads=N] "
        "[--kv_heads=N] [--vocab=N] [--prompt=N] [--decode=N] [--ctx=N] "
        "[--ubatch=N] "
        "[--rounds=N] [--types=f16,bf16,q8_0,q4_0,q4_k,... (f16, bf16 or "
        "quantized)] "
        "[--modes=local,tp,remote,tp-daemons,gpu (each once; the first is the "
        "reference)] [--cache_type=f16|f32|bf16|q8_0|q4_0|q4_1|q5_0|q5_1] "
        "[--tesserad=PATH] [--simd=scalar|avx2|avx512|avx512bf16|amx]\n"
        "heads divides dim, kv_heads (>= 2) divides heads; dim, ff and "
        "dim / kv_heads are multiples of the block size (32, or 256 for the "
        "k-quants)\n");
    return 2;
  }
  if (absl::Status s = tessera::bench::Main(c); !s.ok()) {
    absl::FPrintF(stderr, "llama: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
