// The independent check of the LLaMA runner: a small random-weight LLaMA
// GGUF (2 layers, 64 wide, 4 heads over 2 KV heads, untied output,
// rope_freqs; the K-quant variant 512 wide, the quantized-cache variants
// 128) is written with
// tests/llama/random_llama, run by tessera's runner and by a PyTorch
// LLaMA (tests/llama/llama_reference.py, its own GGUF parser, float64), and
// the logits compared: a prompt of 32 tokens, then 16 greedy decode steps
// teacher-forced with the reference's tokens. Modes: one CPU device, a real
// tesserad (remote: its CPU device, and its meta device of 2 CPU members
// with weights and KV cache split by the client's LLaMA policy), the
// layers over 2 CPU devices (pp 2, prompt micro-batches of 12, or 16
// where a variant asks for the AMX products, pipelined), tensor parallel over 2 CPU devices (tp 2:
// a meta device, heads and FFN split, the KV cache split by heads), and
// both (pp 2 x tp 2: two meta stages of 2 CPU devices each, pipelined), and
// the first GPU where there is one.
//
// Error norm, per logits row r: max_i |tessera_i - ref_i| / max_i |ref_i|
// (the largest error relative to the row's largest logit); the test bounds
// its maximum over the 48 rows.
//  - F32 weights: 1e-4, and every greedy token equal.
//  - F16 matrices (prompt micro-batches of 16): the reference runs on the
//    F16 values. Products of 16 or more columns on AMX CPUs round the
//    activations to BF16 (at most 2^-9 relative, an RMS error of ~0.11%
//    per product); about 9 products in quadrature give ~0.34% RMS, and a
//    row's largest error ~3 RMS against max |ref| ~2.5 RMS of the logits:
//    ~0.4%, bound 1e-2. Elsewhere F16 products are F32 arithmetic.
//    Greedy tokens are not required to match.
//  - Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 matrices: the reference runs on the
//    dequantized weights (its own dequantizers),
//    so the difference is ggml's rounding of the activations to Q8_0 blocks
//    in quantized products: each value moves by at most d/2 = amax/254 of
//    its 32-value block, an RMS error of amax/(254 sqrt 3) ~ 0.5% of the
//    block's RMS for Gaussian-like activations (amax ~ 2.3 RMS). A product
//    with random weights carries that 0.5% relative RMS error; about 9
//    products lie on the path to the logits (Q/K/V, output, gate/up, down
//    per layer, plus the head), adding in quadrature: ~1.5% RMS, and the
//    largest of a row's 128 errors is ~3 RMS while max |ref| is ~2.5 RMS
//    of the logits: bound 5e-2. Greedy tokens are not required to match.
//  - Q4_K_M-like (Q4_K matrices; attn_v, ffn_down and output in Q6_K, as
//    llama.cpp's Q4_K_M keeps them; 512 wide, 128 per head, so that tp 2
//    splits on whole 256-value super-blocks): products with K-quant
//    weights round activations per 256 values, as ggml's Q8_K does, whose
//    largest value is ~3 RMS rather than ~2.3: 1.3x the error per product
//    of the above (~2% RMS), bound 5e-2 as well; measured 2.1-2.6e-2.
//    Q3_K matrices with the others in Q2_K: the same activation rounding
//    (the reference runs on the dequantized 2- and 3-bit weights),
//    measured 2.1-2.3e-2.
//  - Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 KV caches (F32 weights, 128 wide so that a
//    head is one 32-value block): the reference passes K and V through the
//    same quantizers in float32, so what remains is float32 against float64
//    arithmetic and the rare value that this moves across a rounding
//    boundary of the quantizer (one level, at most 1/8 of its block's
//    largest value, in one of a few hundred keys): bound 1e-3, and every
//    greedy token equal.

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backend/assembly/device_spec.h"
#include "backend/comm/host_communicator.h"
#include "backend/meta/llama_policy.h"
#include "backend/meta/meta_device.h"
#include "backend/registry.h"
#include "client/client.h"
#include "graph/type.h"
#include "gtest/gtest.h"
#include "model/ggml_type.h"
#include "model/gguf_reader.h"
#include "runner/llama_runner.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/shell.h"
#include "tests/llama/random_llama.h"

namespace tessera {
namespace {

constexpr int64_t kLayers = 2;
constexpr int64_t kHead = 4;
constexpr int64_t kHeadKv = 2;
constexpr int64_t kVocab = 128;
constexpr int kPrompt = 32;
constexpr int kDecode = 16;

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// A model of the check: its matrices' ggml types, its width and FFN, and
// the bound on its logits' error.
struct Variant {
  const char* name;
  int32_t type;  // the matrices'
  // attn_v, ffn_down and output's, as a Q4_K_M file keeps these in Q6_K.
  int32_t wide_type;
  int64_t embd;
  int64_t ff;
  double bound;
  bool tokens_equal;
  // The KV cache's type (the reference's too).
  Type cache = Type::kF32;
  // Prompt micro-batch: 12 + 12 + 8 (a remainder graph too), or 16 + 16,
  // enough columns for the AMX tile products where the CPU has them.
  int64_t ubatch = 12;
};

// Writes the model of `v`; returns the path.
std::string WriteModel(const Variant& v) {
  const std::string path = TmpDir() + "/" + v.name + ".gguf";
  const absl::Status written = testing::WriteRandomLlama(
      {.n_layer = kLayers,
       .n_embd = v.embd,
       .n_head = kHead,
       .n_head_kv = kHeadKv,
       .n_ff = v.ff,
       .n_vocab = kVocab,
       .type = v.type,
       .wide_type = v.wide_type},
      path);
  EXPECT_TRUE(written.ok()) << written;
  return path;
}

std::vector<int32_t> Prompt() {
  std::vector<int32_t> p;
  for (int i = 0; i < kPrompt; ++i) p.push_back((i * 37 + 11) % kVocab);
  return p;
}

struct Reference {
  std::vector<int32_t> tokens;  // greedy, kDecode
  std::vector<float> logits;    // (kPrompt + kDecode) x kVocab
};

// Runs the PyTorch reference on `model` with a KV cache of `cache`.
Reference RunReference(const std::string& model, Type cache) {
  const std::string out = model + ".ref";
  const std::string script = "tests/llama/llama_reference.py";
  const testing::CommandRun run = testing::RunCommand(absl::StrCat(
      "python3 ", script, " ", model, " ", absl::StrJoin(Prompt(), ","), " ",
      kDecode, " ", out, " ", std::string(TypeName(cache)), " 2>&1"));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  Reference ref;
  std::ifstream f(out, std::ios::binary);
  int32_t header[3] = {0, 0, 0};
  f.read(reinterpret_cast<char*>(header), sizeof(header));
  EXPECT_EQ(header[0], kPrompt + kDecode);
  EXPECT_EQ(header[1], kVocab);
  EXPECT_EQ(header[2], kDecode);
  ref.tokens.resize(kDecode);
  ref.logits.resize((kPrompt + kDecode) * kVocab);
  f.read(reinterpret_cast<char*>(ref.tokens.data()), kDecode * 4);
  f.read(reinterpret_cast<char*>(ref.logits.data()), ref.logits.size() * 4);
  EXPECT_TRUE(f.good()) << "short reference output " << out;
  return ref;
}

// Max over rows of max |a - r| / max |r|.
double MaxRelativeError(const float* a, const float* r, int rows) {
  double worst = 0.0;
  for (int row = 0; row < rows; ++row) {
    double err = 0.0;
    double scale = 0.0;
    for (int i = 0; i < kVocab; ++i) {
      err = std::max(
          err, std::fabs(double{a[row * kVocab + i]} - r[row * kVocab + i]));
      scale = std::max(scale, std::fabs(double{r[row * kVocab + i]}));
    }
    worst = std::max(worst, err / scale);
  }
  return worst;
}

LlamaRunnerOptions Options(const Variant& v) {
  LlamaRunnerOptions o;
  o.n_ctx = 64;
  o.n_ubatch = v.ubatch;
  o.cache_type = v.cache;
  return o;
}

// Runs the prompt and the teacher-forced decode on `runner`; checks the
// logits against `ref` within `bound` and, with `tokens_equal`, the greedy
// tokens. Then runs them again with ProcessGreedy (remote: the daemon's
// ARGMAX, no logits read back), whose tokens must be the argmax of each
// row of the first pass, and, with `tokens_equal`, generates with
// GenerateGreedy (its own tokens fed back), which must give the
// reference's.
void Check(LlamaRunner& runner, const Reference& ref, double bound,
           bool tokens_equal, const std::string& what) {
  absl::StatusOr<std::vector<float>> prompt = runner.Process(Prompt());
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  std::vector<float> logits = *prompt;
  for (int i = 0; i < kDecode; ++i) {
    const int32_t mine = ArgmaxToken(
        absl::MakeConstSpan(logits).subspan(logits.size() - kVocab));
    if (tokens_equal) {
      EXPECT_EQ(mine, ref.tokens[i]) << what << " decode step " << i;
    }
    absl::StatusOr<std::vector<float>> step = runner.Process({ref.tokens[i]});
    ASSERT_TRUE(step.ok()) << step.status();
    logits.insert(logits.end(), step->begin(), step->end());
  }
  ASSERT_EQ(logits.size(), ref.logits.size());
  const double prompt_err =
      MaxRelativeError(logits.data(), ref.logits.data(), kPrompt);
  const double decode_err =
      MaxRelativeError(logits.data() + kPrompt * kVocab,
                       ref.logits.data() + kPrompt * kVocab, kDecode);
  std::printf("%s: max relative error prompt %.3g decode %.3g (bound %.3g)\n",
              what.c_str(), prompt_err, decode_err, bound);
  EXPECT_LE(prompt_err, bound) << what;
  EXPECT_LE(decode_err, bound) << what;

  runner.Reset();
  const auto row = [&](int r) {
    return ArgmaxToken(absl::MakeConstSpan(logits).subspan(r * kVocab, kVocab));
  };
  absl::StatusOr<int32_t> next = runner.ProcessGreedy(Prompt());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, row(kPrompt - 1)) << what << " greedy prompt";
  for (int i = 0; i < kDecode; ++i) {
    next = runner.ProcessGreedy({ref.tokens[i]});
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(*next, row(kPrompt + i)) << what << " greedy decode step " << i;
  }
  EXPECT_EQ(runner.n_past(), kPrompt + kDecode);
  EXPECT_EQ(runner.ProcessGreedy({}).status().code(),
            absl::StatusCode::kInvalidArgument);

  if (tokens_equal) {
    runner.Reset();
    absl::StatusOr<std::vector<int32_t>> generated =
        GenerateGreedy(runner, Prompt(), kDecode);
    ASSERT_TRUE(generated.ok()) << generated.status();
    EXPECT_EQ(*generated, ref.tokens) << what << " GenerateGreedy";
  }
}

// LLaMA's head-aligned split of `v`'s model.
LlamaSplitOptions SplitOptions(const Variant& v) {
  return {.head_dim = v.embd / kHead,
          .gqa_ratio = kHead / kHeadKv,
          .ffn_granularity = Traits(*TesseraTypeFromGgml(v.type)).block_size};
}

// pp stages of tp CPU members (one thread each) grouped by a meta device
// with LLaMA's head-aligned split, and one more CPU device as the
// scheduler's fallback.
struct TensorParallel {
  Registry registry;
  std::vector<std::unique_ptr<HostCommunicator>> comms;
  std::vector<std::unique_ptr<MetaDevice>> metas;
  std::vector<Device*> stages;
  Device* fallback = nullptr;

  TensorParallel(int pp, int tp, const Variant& v) {
    EXPECT_TRUE(
        AddDevices(absl::StrCat("cpu:", pp * tp + 1), 1, registry).ok());
    const std::vector<Device*> cpus(registry.devices().begin(),
                                    registry.devices().end());
    const LlamaSplitOptions split = SplitOptions(v);
    for (int g = 0; g < pp; ++g) {
      std::vector<Device*> members(cpus.begin() + g * tp,
                                   cpus.begin() + (g + 1) * tp);
      comms.push_back(HostCommunicator::Create(members).value());
      metas.push_back(MetaDevice::Create(absl::StrCat("tp", g), members,
                                         *comms.back(),
                                         LlamaSplitPolicy(tp, split))
                          .value());
      stages.push_back(metas.back().get());
    }
    fallback = cpus.back();
  }
};

class LlamaCheckTest : public ::testing::TestWithParam<Variant> {};

TEST_P(LlamaCheckTest, MatchesPyTorchLocalPipelinedTensorParallelRemote) {
  const Variant v = GetParam();
  const std::string path = WriteModel(v);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const Reference ref = RunReference(path, v.cache);
  if (::testing::Test::HasFailure()) return;

  {
    Registry registry;
    ASSERT_TRUE(AddDevices("cpu", 2, registry).ok());
    auto runner =
        LlamaRunner::CreateLocal(**file, {registry.devices()[0]}, Options(v));
    ASSERT_TRUE(runner.ok()) << runner.status();
    Check(**runner, ref, v.bound, v.tokens_equal,
          absl::StrCat(v.name, " local"));
  }
  {
    Registry registry;
    ASSERT_TRUE(AddDevices("cpu:2", 1, registry).ok());
    auto runner = LlamaRunner::CreateLocal(
        **file, {registry.devices()[0], registry.devices()[1]}, Options(v));
    ASSERT_TRUE(runner.ok()) << runner.status();
    Check(**runner, ref, v.bound, v.tokens_equal,
          absl::StrCat(v.name, " pp 2"));
  }
  for (const auto& [pp, tp] : {std::pair{1, 2}, std::pair{2, 2}}) {
    TensorParallel devices(pp, tp, v);
    auto runner = LlamaRunner::CreateLocal(**file, devices.stages, Options(v),
                                           devices.fallback);
    ASSERT_TRUE(runner.ok()) << runner.status();
    const std::string mode = pp == 1 ? absl::StrCat(" tp ", tp)
                                     : absl::StrCat(" pp ", pp, " x tp ", tp);
    Check(**runner, ref, v.bound, v.tokens_equal, v.name + mode);
  }
  {
    // The first GPU, where there is one, the CPU as the fallback.
    Registry registry;
    ASSERT_TRUE(AddDevices("all", 1, registry).ok());
    Device* gpu = nullptr;
    Device* cpu = nullptr;
    for (Device* device : registry.devices()) {
      (device->Props().type == DeviceType::kGpu ? gpu : cpu) = device;
    }
    if (gpu != nullptr) {
      auto runner = LlamaRunner::CreateLocal(**file, {gpu}, Options(v), cpu);
      ASSERT_TRUE(runner.ok()) << runner.status();
      Check(**runner, ref, v.bound, v.tokens_equal,
            absl::StrCat(v.name, " ", gpu->name()));
    }
  }
  {
    // The daemon's first CPU device, then its meta device over two more.
    auto daemon = testing::DaemonProcess::Start(
        {"--devices=cpu:3,tp0=meta(cpu1,cpu2)"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    auto client = client::Client::Connect((*daemon)->address());
    ASSERT_TRUE(client.ok()) << client.status();
    for (const char* device : {"cpu0", "tp0"}) {
      LlamaRunnerOptions options = Options(v);
      std::atomic<int> split_tensors = 0;
      options.prepare_remote = [&](client::RemoteDevice& d) {
        if (!d.is_meta()) return absl::OkStatus();
        const SplitPolicy llama = LlamaSplitPolicy(2, SplitOptions(v));
        return d.SetSplitPolicy([&, llama](const Tensor& t) {
          const SplitState state = llama(t);
          if (state.axis != SplitAxis::kMirrored) ++split_tensors;
          return state;
        });
      };
      auto runner =
          LlamaRunner::CreateRemote(**file, **client, device, options);
      ASSERT_TRUE(runner.ok()) << runner.status();
      // On the meta device Q/K/V, O, the FFN and the KV cache are split.
      if (std::string(device) == "tp0") {
        EXPECT_GT(split_tensors, 0);
      }
      Check(**runner, ref, v.bound, v.tokens_equal,
            absl::StrCat(v.name, " remote ", device));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Weights, LlamaCheckTest,
    ::testing::Values(
        Variant{"f32", kGgmlF32, kGgmlF32, 64, 96, 1e-4, true},
        Variant{"q8_0", kGgmlQ8_0, kGgmlQ8_0, 64, 96, 5e-2, false,
                Type::kF32, 16},
        Variant{"q4_0", kGgmlQ4_0, kGgmlQ4_0, 64, 96, 5e-2, false,
                Type::kF32, 16},
        Variant{"f16", kGgmlF16, kGgmlF16, 64, 96, 1e-2, false, Type::kF32,
                16},
        // Q5_0 matrices with Q5_1 where Q4_K_M keeps Q6_K, and Q4_1 ones.
        Variant{"q5_0", kGgmlQ5_0, kGgmlQ5_1, 64, 96, 5e-2, false},
        Variant{"q4_1", kGgmlQ4_1, kGgmlQ4_1, 64, 96, 5e-2, false},
        Variant{"q4_k_m", kGgmlQ4_K, kGgmlQ6_K, 512, 512, 5e-2, false},
        // Q3_K matrices with Q2_K where the others stay wider: the
        // reference's own 2- and 3-bit dequantizers.
        Variant{"q3_k_q2_k", kGgmlQ3_K, kGgmlQ2_K, 512, 512, 5e-2, false},
        // Quantized KV caches (heads of 32 values, one block):
        // the reference stores K and V through the same quantizers.
        Variant{"f32_q8_0_cache", kGgmlF32, kGgmlF32, 128, 96, 1e-3, true,
                Type::kQ8_0},
        Variant{"f32_q4_0_cache", kGgmlF32, kGgmlF32, 128, 96, 1e-3, true,
                Type::kQ4_0},
        Variant{"f32_q4_1_cache", kGgmlF32, kGgmlF32, 128, 96, 1e-3, true,
                Type::kQ4_1},
        Variant{"f32_q5_0_cache", kGgmlF32, kGgmlF32, 128, 96, 1e-3, true,
                Type::kQ5_0},
        Variant{"f32_q5_1_cache", kGgmlF32, kGgmlF32, 128, 96, 1e-3, true,
                Type::kQ5_1}),
    [](const ::testing::TestParamInfo<Variant>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace tessera
