// The tessera command-line tool against a real tesserad: devices, ping,
// upload (with its progress bar, and nothing sent the second time), bench,
// run (a LLaMA GGUF locally, pipelined, tensor parallel and on the
// daemon's devices), and the messages for a daemon that cannot be reached,
// a refused token and a TLS mismatch.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/shell.h"
#include "tests/integration/test_certs.h"
#include "tests/llama/random_llama.h"

namespace tessera {
namespace {

using testing::CommandRun;
using testing::DaemonProcess;
using testing::RunCommand;
using testing::WriteTempFile;

std::string CliPath() {
  return testing::RunfilesBinary("client/tessera", "TESSERA_CLI").value();
}

// Runs the tool with `args`, and `env` (NAME=VALUE ...) in its environment;
// the output holds stdout and stderr together.
CommandRun Cli(const std::vector<std::string>& args,
               const std::string& env = "") {
  return RunCommand(absl::StrCat(env, " ", CliPath(), " ",
                                 absl::StrJoin(args, " "), " 2>&1"));
}

bool Has(const CommandRun& run, const std::string& text) {
  return run.output.find(text) != std::string::npos;
}

TEST(CliTest, DevicesPingUploadAndBench) {
  auto daemon = DaemonProcess::Start({"--devices=cpu:2"}).value();
  const std::string target = "--target=" + daemon->address();

  CommandRun devices = Cli({target, "devices"});
  EXPECT_EQ(devices.exit_code, 0) << devices.output;
  EXPECT_TRUE(Has(devices, "\ncpu0 ")) << devices.output;
  EXPECT_TRUE(Has(devices, "\ncpu1 ")) << devices.output;

  CommandRun ping = Cli({target, "ping"});
  EXPECT_EQ(ping.exit_code, 0) << ping.output;
  EXPECT_TRUE(Has(ping, "10 round trips")) << ping.output;

  std::string bytes(3 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 13);
  const std::string file = WriteTempFile("weights.bin", bytes);
  CommandRun first = Cli({target, "--device=cpu1", "upload", file});
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(Has(first, "3.0 MiB sent to cpu1")) << first.output;
  // The progress bar: full, with bytes, percent and rate.
  EXPECT_TRUE(Has(first, "[##############################] 3.0 MiB / 3.0 MiB  100%"))
      << first.output;
  EXPECT_TRUE(Has(first, "GB/s")) << first.output;
  CommandRun second = Cli({target, "--device=cpu1", "upload", file});
  EXPECT_EQ(second.exit_code, 0) << second.output;
  EXPECT_TRUE(Has(second, "the daemon had it")) << second.output;
  EXPECT_FALSE(Has(second, "100%")) << second.output;

  CommandRun bench = Cli({target, "--bench_mib=16", "bench"});
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_TRUE(Has(bench, "upload")) << bench.output;
  EXPECT_TRUE(Has(bench, "download")) << bench.output;

  CommandRun missing = Cli({target, "upload", ::testing::TempDir() + "/no-such-file"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(Has(missing, "no-such-file: cannot be read")) << missing.output;
  CommandRun usage = Cli({target, "frobnicate"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_TRUE(Has(usage, "usage: tessera")) << usage.output;
}

TEST(CliTest, SaysWhyItCannotConnect) {
  // Nothing listens on a port of a daemon that has exited.
  std::string gone;
  {
    auto daemon = DaemonProcess::Start({"--devices=cpu:1"}).value();
    gone = "--target=" + daemon->address();
  }
  CommandRun unreachable = Cli({gone, "ping"});
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_TRUE(Has(unreachable, "cannot reach the daemon")) << unreachable.output;

  const std::string token = WriteTempFile("token", "right-token\n");
  const std::string wrong = WriteTempFile("wrong-token", "wrong-token\n");
  auto guarded =
      DaemonProcess::Start({"--devices=cpu:1", "--token_file=" + token}).value();
  const std::string target = "--target=" + guarded->address();
  CommandRun refused = Cli({target, "--token_file=" + wrong, "ping"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(Has(refused, "refused the credentials")) << refused.output;
  CommandRun accepted = Cli({target, "--token_file=" + token, "ping"});
  EXPECT_EQ(accepted.exit_code, 0) << accepted.output;
  // The token can come from the environment too.
  CommandRun from_env = Cli({target, "ping"}, "TESSERA_TOKEN_FILE=" + token);
  EXPECT_EQ(from_env.exit_code, 0) << from_env.output;

  // TLS to a plaintext port.
  const testing::TestCerts certs = testing::MakeTestCerts().value();
  CommandRun tls = Cli({target, "--token_file=" + token, "--tls_ca=" + certs.ca_pem,
                 "ping"});
  EXPECT_EQ(tls.exit_code, 1);
  EXPECT_TRUE(Has(tls, "cannot reach the daemon")) << tls.output;
}

// The last line of `run`'s output: the tokens `tessera run` printed.
std::string LastLine(const CommandRun& run) {
  std::string out = run.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out.substr(out.rfind('\n') + 1);
}

// `tessera run` on a small F32 LLaMA: the greedy tokens are the same on one
// local device, over pp 2 and tp 2, on a daemon's CPU device and meta
// device, and tensor parallel over the CPU devices of two daemons (F32: the modes differ by float rounding only, far below the
// logits' gaps on this model, as tests/llama's check shows).
TEST(CliTest, RunGivesTheSameTokensInEveryMode) {
  const std::string model = ::testing::TempDir() + "/llama.gguf";
  ASSERT_TRUE(testing::WriteRandomLlama({}, model).ok());
  auto daemon =
      DaemonProcess::Start({"--devices=cpu:3,tp0=meta(cpu1,cpu2)"}).value();
  auto second = DaemonProcess::Start({"--devices=cpu"}).value();
  const std::string both = daemon->address() + "," + second->address();
  const std::vector<std::string> run = {"run", "--model=" + model,
                                        "--prompt_tokens=1,15,30,45,60",
                                        "--n_predict=8"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = run;
    args.insert(args.end(), more.begin(), more.end());
    return Cli(args);
  };
  const CommandRun local = with({});
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const std::string tokens = LastLine(local);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), ','), 7) << tokens;
  for (const std::vector<std::string>& mode :
       std::vector<std::vector<std::string>>{
           {"--pp=2"},
           {"--tp=2"},
           {"--remote=" + daemon->address(), "--device=cpu0"},
           {"--remote=" + daemon->address(), "--device=tp0"},
           {"--remote=" + both, "--device=cpu0"},
           {"--remote=" + both, "--tp=2"}}) {
    const CommandRun other = with(mode);
    EXPECT_EQ(other.exit_code, 0) << other.output;
    EXPECT_EQ(LastLine(other), tokens) << absl::StrJoin(mode, " ");
  }
  const CommandRun missing =
      with({"--remote=" + daemon->address(), "--device=gpu9"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_TRUE(Has(missing, "the daemon has no device \"gpu9\""))
      << missing.output;
  const CommandRun mismatch = with({"--remote=" + both, "--tp=3"});
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_TRUE(Has(mismatch, "1 or the number of daemons")) << mismatch.output;
}

// `tessera run --cache_type`: a KV cache of BF16, or of Q8_0 and Q4_0 for
// heads of whole 32-value blocks, locally and on a daemon, of the size its
// type gives (the run's summary on stderr); a cache type
// FLASH_ATTN_EXT does not read, a head size that is not whole blocks and a
// name that is no type are refused with messages that say so. (The values
// of such caches are checked against PyTorch in tests/llama.)
TEST(CliTest, RunKeepsTheKvCacheInTheTypeAsked) {
  const std::string model = ::testing::TempDir() + "/llama_h32.gguf";
  ASSERT_TRUE(testing::WriteRandomLlama({.n_embd = 128}, model).ok());
  auto daemon = DaemonProcess::Start({"--devices=cpu"}).value();
  const std::vector<std::string> run = {
      "run", "--model=" + model, "--prompt_tokens=1,15,30,45,60",
      "--n_predict=4", "--n_ctx=4096"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = run;
    args.insert(args.end(), more.begin(), more.end());
    return Cli(args);
  };
  // 2 layers x K and V x 4096 positions of 64 values (2 KV heads of 32):
  // 2 bytes a value in F16 and BF16 (2 MiB), 34 per 32 in Q8_0, 18 per 32
  // in Q4_0.
  const std::pair<const char*, const char*> sizes[] = {
      {"f16", "KV cache f16, 4096 positions, 2.00 MiB"},
      {"bf16", "KV cache bf16, 4096 positions, 2.00 MiB"},
      {"q8_0", "KV cache q8_0, 4096 positions, 1.06 MiB"},
      {"q4_0", "KV cache q4_0, 4096 positions, 0.56 MiB"}};
  for (const auto& [type, summary] : sizes) {
    for (const std::vector<std::string>& mode :
         std::vector<std::vector<std::string>>{
             {}, {"--remote=" + daemon->address()}}) {
      std::vector<std::string> args = mode;
      if (std::string(type) != "f16") {
        args.push_back(absl::StrCat("--cache_type=", type));
      }
      const CommandRun ok = with(args);
      EXPECT_EQ(ok.exit_code, 0) << ok.output;
      EXPECT_TRUE(Has(ok, summary)) << ok.output;
      const std::string tokens = LastLine(ok);
      EXPECT_EQ(std::count(tokens.begin(), tokens.end(), ','), 3) << tokens;
    }
  }
  const CommandRun k_quant = with({"--cache_type=q4_K"});
  EXPECT_EQ(k_quant.exit_code, 1);
  EXPECT_TRUE(Has(k_quant,
                  "cache type must be f32, f16, bf16, q8_0, q4_0, q4_1, "
                  "q5_0 or q5_1"))
      << k_quant.output;
  const CommandRun unknown = with({"--cache_type=int3"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(Has(unknown, "--cache_type=int3 is not a type name"))
      << unknown.output;

  const std::string narrow = ::testing::TempDir() + "/llama_h16.gguf";
  ASSERT_TRUE(testing::WriteRandomLlama({}, narrow).ok());
  const CommandRun split_block = Cli(
      {"run", "--model=" + narrow, "--prompt_tokens=1,2", "--cache_type=q8_0"});
  EXPECT_EQ(split_block.exit_code, 1);
  EXPECT_TRUE(Has(split_block,
                  "a q8_0 cache needs a head size that is a multiple of 32, "
                  "got 16"))
      << split_block.output;
}

}  // namespace
}  // namespace tessera
