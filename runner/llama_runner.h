#ifndef TESSERA_RUNNER_LLAMA_RUNNER_H_
#define TESSERA_RUNNER_LLAMA_RUNNER_H_

// Runs a LLaMA GGUF model (model/llama.h) on devices: uploads the weights,
// keeps the KV cache in device buffers, processes a prompt in micro-batches
// and decodes one token at a time with a graph of fixed shape (attention
// over the cache's whole capacity under a mask, as llama.cpp does; the
// CPU's FLASH_ATTN_EXT reads only the positions the mask leaves), built
// once per batch size.
//
// Where the graphs run:
//  - Local: one or more devices driven by a Scheduler. With several, the
//    layers are spread over them in contiguous ranges (pipeline parallel:
//    token_embd and rope_freqs on the first, output_norm and output on the
//    last) and consecutive prompt micro-batches overlap across devices
//    (n_copies graphs in flight).
//  - Remote: a tesserad's device. Weights go up once with
//    Client::WriteTensorCached (a second load sends no bytes; the split
//    weights of a meta device go whole with their layout instead); each
//    graph is
//    registered once (RemoteGraph) and executed per micro-batch or token
//    over the Execute stream.
// Tensor parallelism plugs in as a local device: a meta device
// (backend/meta) passed as the only device (tp N), or one per pipeline
// stage (pp P x tp N), with a CPU device as the scheduler's fallback. The
// meta device's split policy splits each weight and the KV cache (by
// heads); PlaceWeights stays the one place that maps weights to devices.
//
//   auto file = GgufFile::Open(path).value();
//   auto runner = LlamaRunner::CreateLocal(*file, {cpu}, {}).value();
//   std::vector<float> logits = runner->Process(prompt).value();
//   int32_t next = Argmax(last row of logits) ...
//   logits = runner->Process({next}).value();
//   // or, greedy, without the logits:
//   next = runner->ProcessGreedy({next}).value();
//
// Not thread-safe. The GgufFile must outlive Create (weights are copied to
// the devices), the devices and the client the runner.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "backend/buffer.h"
#include "backend/device.h"
#include "backend/stream.h"
#include "client/client.h"
#include "client/remote_device.h"
#include "client/remote_graph.h"
#include "graph/context.h"
#include "model/gguf_reader.h"
#include "model/llama.h"
#include "sched/scheduler.h"

namespace tessera {

struct LlamaRunnerOptions {
  // Cache capacity in tokens; 0 means min(context_length, 4096).
  int64_t n_ctx = 0;
  // Prompt tokens per micro-batch.
  int64_t n_ubatch = 32;
  Type cache_type = Type::kF16;
  // Local mode: micro-batches in flight (1 to kMaxCopies); 0 means the
  // number of devices (capped at kMaxCopies).
  int n_copies = 0;
  // Remote mode: called with the daemon's device before the weights and
  // the cache are placed on it; a daemon's meta device gets its split
  // policy here (RemoteDevice::SetSplitPolicy), else its tensors are
  // mirrored on every member.
  std::function<absl::Status(client::RemoteDevice&)> prepare_remote;
};

class LlamaRunner {
 public:
  // Local devices: the pipeline stages, which hold the layers in order. The
  // scheduler's fallback (for ops no stage supports) must be a CPU device:
  // `fallback` when given (it holds no weights and is not a stage), else
  // the last device (a stage too). Example, tp 2:
  //   CreateLocal(file, {meta}, options, cpu);
  // Errors: those of LlamaConfig/LlamaWeights::FromGguf, INVALID_ARGUMENT
  // for bad options or devices, the devices' allocation and transfer
  // errors.
  static absl::StatusOr<std::unique_ptr<LlamaRunner>> CreateLocal(
      const GgufFile& file, std::vector<Device*> devices,
      const LlamaRunnerOptions& options, Device* fallback = nullptr);
  // The daemon's device `device` (its name there, e.g. "cpu0"; empty: the
  // first). Errors: as CreateLocal; the daemon's errors.
  static absl::StatusOr<std::unique_ptr<LlamaRunner>> CreateRemote(
      const GgufFile& file, client::Client& client, const std::string& device,
      const LlamaRunnerOptions& options);

  ~LlamaRunner();
  LlamaRunner(const LlamaRunner&) = delete;
  LlamaRunner& operator=(const LlamaRunner&) = delete;

  const LlamaConfig& config() const { return config_; }
  // The KV cache's tensors (their type and shape; the data is on the
  // devices).
  const LlamaCache& cache() const { return cache_; }
  int64_t n_ctx() const { return cache_.n_ctx; }
  // Tokens in the cache (the next token's position).
  int64_t n_past() const { return n_past_; }
  // Bytes of weights uploaded.
  uint64_t weight_bytes() const { return weight_bytes_; }
  // Splits of the local scheduler's plan for the last graph computed, and
  // the split inputs it copies between devices (0 for a remote runner).
  int n_splits() const { return sched_ != nullptr ? sched_->n_splits() : 0; }
  int n_inputs_copied() const {
    return sched_ != nullptr ? sched_->n_inputs_copied() : 0;
  }
  // Forgets the sequence (the cache rows are masked, not cleared).
  void Reset() { n_past_ = 0; }

  // Appends `tokens` to the sequence (micro-batches of n_ubatch, one token
  // with the decode graph) and returns their logits, n_vocab per token.
  // Errors: OUT_OF_RANGE when the cache cannot hold them; INVALID_ARGUMENT
  // for a token id outside the vocabulary; the devices' errors (the
  // sequence is then left as it was before the call).
  absl::StatusOr<std::vector<float>> Process(absl::Span<const int32_t> tokens);
  // Appends `tokens` as Process does and returns the most likely next
  // token: the first maximum of the last token's logits (ArgmaxToken).
  // Remote mode reads back no logits, only that index (an ARGMAX node the
  // daemon computes), and nothing for the earlier micro-batches. Errors:
  // as Process.
  absl::StatusOr<int32_t> ProcessGreedy(absl::Span<const int32_t> tokens);

 private:
  // A forward graph of one batch size, with where it runs.
  struct BatchGraph {
    std::unique_ptr<Context> ctx;
    std::unique_ptr<LlamaForward> fwd;
    // Remote mode: the registered graph, and the ARGMAX of the logits
    // (I32 [n_tokens]) added to it.
    std::unique_ptr<client::RemoteGraph> remote;
    Tensor* argmax = nullptr;
  };
  // Host inputs of one micro-batch.
  struct BatchInputs {
    std::vector<int32_t> tokens;
    std::vector<int32_t> positions;
    std::vector<uint16_t> mask;
  };

  LlamaRunner(const GgufFile& file, LlamaConfig config,
              LlamaRunnerOptions options);
  // Steps of Create.
  absl::Status Init(std::vector<Device*> devices, Device* fallback);
  absl::Status PlaceWeights(const std::vector<Device*>& devices);
  absl::Status Upload();
  absl::StatusOr<BatchGraph*> GraphFor(int64_t n_tokens);
  BatchInputs MakeInputs(absl::Span<const int32_t> tokens, int64_t pos) const;
  absl::Status CheckTokens(absl::Span<const int32_t> tokens) const;
  // Run `tokens` (CheckTokens passed) and advance n_past. Results: every
  // token's logits into `logits` (when not null) and the last token's
  // argmax into `next` (when not null).
  absl::Status Run(absl::Span<const int32_t> tokens, float* logits,
                   int32_t* next);
  absl::Status RunLocal(absl::Span<const int32_t> tokens, float* logits,
                        int32_t* next);
  absl::Status RunRemote(absl::Span<const int32_t> tokens, float* logits,
                         int32_t* next);

  const GgufFile& file_;
  const LlamaConfig config_;
  const LlamaRunnerOptions options_;
  client::Client* client_ = nullptr;  // remote mode
  std::string remote_device_;
  std::vector<std::unique_ptr<client::RemoteDevice>> remote_devices_;

  Context weights_ctx_;
  LlamaWeights weights_;
  LlamaCache cache_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  uint64_t weight_bytes_ = 0;

  // Local mode.
  std::vector<std::unique_ptr<Stream>> streams_;
  std::unique_ptr<Scheduler> sched_;
  const BatchGraph* allocated_ = nullptr;

  std::map<int64_t, BatchGraph> graphs_;
  int64_t n_past_ = 0;
};

// Greedy decoding: processes `prompt`, then picks the most likely token
// n_predict times (feeding each back). `on_token` (optional) sees each
// token as it comes. Returns the generated tokens.
absl::StatusOr<std::vector<int32_t>> GenerateGreedy(
    LlamaRunner& runner, absl::Span<const int32_t> prompt, int n_predict,
    const std::function<void(int32_t)>& on_token = nullptr);

// The index of the first maximum of `row`.
int32_t ArgmaxToken(absl::Span<const float> row);

}  // namespace tessera

#endif  // TESSERA_RUNNER_LLAMA_RUNNER_H_
