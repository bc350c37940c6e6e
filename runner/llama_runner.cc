#include "runner/llama_runner.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/alloc/tensor_allocator.h"
#include "base/status_macros.h"
#include "client/remote_buffer.h"
#include "graph/ops.h"

namespace tessera {
namespace {

absl::Status Invalid(auto&&... args) {
  return absl::InvalidArgumentError(absl::StrCat("[LlamaRunner] ", args...));
}

}  // namespace

LlamaRunner::LlamaRunner(const GgufFile& file, LlamaConfig config,
                         LlamaRunnerOptions options)
    : file_(file), config_(std::move(config)), options_(std::move(options)) {}

LlamaRunner::~LlamaRunner() {
  if (sched_ != nullptr) (void)sched_->Synchronize();
  // Graphs (remote ones release themselves) go before the buffers they use.
  graphs_.clear();
  sched_.reset();
}

absl::StatusOr<std::unique_ptr<LlamaRunner>> LlamaRunner::CreateLocal(
    const GgufFile& file, std::vector<Device*> devices,
    const LlamaRunnerOptions& options, Device* fallback) {
  if (devices.empty()) return Invalid("no devices");
  for (Device* d : devices) {
    if (d == nullptr) return Invalid("null device");
    if (d == fallback) {
      return Invalid("the fallback ", d->name(), " is also a stage");
    }
  }
  Device* cpu = fallback != nullptr ? fallback : devices.back();
  if (cpu->Props().type != DeviceType::kCpu) {
    return Invalid(fallback != nullptr ? "the fallback" : "the last device",
                   " must be a CPU device, got ", cpu->name());
  }
  TESSERA_ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfig::FromGguf(file));
  std::unique_ptr<LlamaRunner> runner(
      new LlamaRunner(file, std::move(config), options));
  TESSERA_RETURN_IF_ERROR(runner->Init(std::move(devices), fallback));
  return runner;
}

absl::StatusOr<std::unique_ptr<LlamaRunner>> LlamaRunner::CreateRemote(
    const GgufFile& file, client::Client& client, const std::string& device,
    const LlamaRunnerOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfig::FromGguf(file));
  std::unique_ptr<LlamaRunner> runner(
      new LlamaRunner(file, std::move(config), options));
  runner->client_ = &client;
  TESSERA_ASSIGN_OR_RETURN(runner->remote_devices_,
                           client::RemoteDevice::ListAll(client));
  client::RemoteDevice* chosen = nullptr;
  for (const auto& d : runner->remote_devices_) {
    if (device.empty() || d->remote_name() == device) {
      chosen = d.get();
      runner->remote_device_ = d->remote_name();
      break;
    }
  }
  if (chosen == nullptr) {
    return Invalid("the daemon has no device \"", device, "\"");
  }
  if (options.prepare_remote) {
    TESSERA_RETURN_IF_ERROR(options.prepare_remote(*chosen));
  }
  TESSERA_RETURN_IF_ERROR(runner->Init({chosen}, nullptr));
  return runner;
}

absl::Status LlamaRunner::Init(std::vector<Device*> devices,
                               Device* fallback) {
  if (options_.n_ubatch < 1) return Invalid("n_ubatch must be >= 1");
  const int64_t n_ctx = options_.n_ctx > 0
                            ? options_.n_ctx
                            : std::min<int64_t>(config_.n_ctx_train, 4096);
  TESSERA_ASSIGN_OR_RETURN(
      weights_, LlamaWeights::FromGguf(file_, config_, weights_ctx_));
  TESSERA_ASSIGN_OR_RETURN(cache_, LlamaCache::Make(config_, n_ctx,
                                                    options_.cache_type,
                                                    weights_ctx_));
  TESSERA_RETURN_IF_ERROR(PlaceWeights(devices));
  TESSERA_RETURN_IF_ERROR(Upload());
  if (client_ != nullptr) return absl::OkStatus();

  std::vector<Device*> stream_devices = devices;
  if (fallback != nullptr) stream_devices.push_back(fallback);
  for (Device* d : stream_devices) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s, d->CreateStream());
    streams_.push_back(std::move(s));
  }
  std::vector<Stream*> streams;
  for (auto& s : streams_) streams.push_back(s.get());
  SchedulerOptions so;
  so.n_copies = options_.n_copies > 0
                    ? options_.n_copies
                    : std::min<int>(static_cast<int>(devices.size()),
                                    kMaxCopies);
  TESSERA_ASSIGN_OR_RETURN(sched_, Scheduler::Create(streams, {}, so));
  // Compute memory for the largest graph, so that switching between the
  // prompt and decode graphs never grows it.
  TESSERA_ASSIGN_OR_RETURN(
      BatchGraph * largest,
      GraphFor(std::min<int64_t>(options_.n_ubatch, cache_.n_ctx)));
  return sched_->Reserve(largest->fwd->graph);
}

absl::Status LlamaRunner::PlaceWeights(const std::vector<Device*>& devices) {
  // Layer l goes to device l * N / n_layer; the embedding and rope factors
  // to the first device, the output head to the last.
  const int64_t n = static_cast<int64_t>(devices.size());
  std::vector<std::vector<Tensor*>> weights(n);
  std::vector<std::vector<Tensor*>> caches(n);
  auto add = [&](Tensor* t, int64_t d) {
    if (t != nullptr && t->buffer == nullptr &&
        std::find(weights[d].begin(), weights[d].end(), t) ==
            weights[d].end()) {
      weights[d].push_back(t);
    }
  };
  add(weights_.token_embd, 0);
  add(weights_.rope_freqs, 0);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    const int64_t d = l * n / config_.n_layer;
    const LlamaLayer& L = weights_.layers[l];
    for (Tensor* t : {L.attn_norm, L.wq, L.wk, L.wv, L.wo, L.ffn_norm,
                      L.ffn_gate, L.ffn_up, L.ffn_down}) {
      add(t, d);
    }
    caches[d].push_back(cache_.k[l]);
    caches[d].push_back(cache_.v[l]);
  }
  add(weights_.output_norm, n - 1);
  if (weights_.output != weights_.token_embd) add(weights_.output, n - 1);
  // The KV cache is placed like the weights (its own buffer, laid out for
  // exactly its tensors), so that a meta device packs each member's heads
  // of it rather than giving every member a buffer the size of the whole.
  // A packed buffer is addressed by tensor only: the cache is written by
  // graphs (SET_ROWS) and cleared whole, never by byte ranges.
  for (int64_t d = 0; d < n; ++d) {
    for (auto* group : {&weights[d], &caches[d]}) {
      if (group->empty()) continue;
      TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                               AllocTensors(devices[d]->buffer_type(), *group,
                                            BufferUsage::kWeights));
      buffers_.push_back(std::move(buffer));
    }
  }
  return absl::OkStatus();
}

absl::Status LlamaRunner::Upload() {
  for (size_t i = 0; i < weights_.all.size(); ++i) {
    Tensor& t = *weights_.all[i];
    const absl::Span<const uint8_t> data = weights_.data[i];
    if (data.size() != t.NumBytes()) {
      return Invalid(t.name, ": the file holds ", data.size(),
                     " bytes, the tensor needs ", t.NumBytes());
    }
    // A daemon's meta device takes split weights with their layout, which
    // only a whole-tensor write carries (not the content cache); mirrored
    // ones go through the cache like any other.
    auto* remote = dynamic_cast<client::RemoteBuffer*>(t.buffer);
    bool split = false;
    if (remote != nullptr) {
      TESSERA_ASSIGN_OR_RETURN(split, remote->IsSplit(t));
    }
    if (remote != nullptr && !split) {
      TESSERA_ASSIGN_OR_RETURN(v1::TensorRef ref, remote->RefOf(t));
      TESSERA_RETURN_IF_ERROR(
          remote->client().WriteTensorCached(ref, data.data(), data.size()));
    } else {
      TESSERA_RETURN_IF_ERROR(
          t.buffer->SetTensor(t, data.data(), 0, data.size()));
    }
    weight_bytes_ += data.size();
  }
  return absl::OkStatus();
}

absl::StatusOr<LlamaRunner::BatchGraph*> LlamaRunner::GraphFor(
    int64_t n_tokens) {
  auto it = graphs_.find(n_tokens);
  if (it != graphs_.end()) return &it->second;
  BatchGraph g;
  g.ctx = std::make_unique<Context>();
  TESSERA_ASSIGN_OR_RETURN(
      g.fwd, BuildLlamaForward(*g.ctx, config_, weights_, cache_, n_tokens));
  if (client_ != nullptr) {
    // Greedy decoding reads back this index instead of the logits.
    TESSERA_ASSIGN_OR_RETURN(g.argmax, Argmax(*g.ctx, g.fwd->logits));
    g.argmax->name = "argmax";
    TESSERA_RETURN_IF_ERROR(g.fwd->graph.Expand(g.argmax));
    client::RemoteGraph::Options ro;
    ro.devices = {remote_device_};
    TESSERA_ASSIGN_OR_RETURN(
        g.remote, client::RemoteGraph::Register(*client_, g.fwd->graph, ro));
  }
  return &graphs_.emplace(n_tokens, std::move(g)).first->second;
}

LlamaRunner::BatchInputs LlamaRunner::MakeInputs(
    absl::Span<const int32_t> tokens, int64_t pos) const {
  BatchInputs in;
  in.tokens.assign(tokens.begin(), tokens.end());
  for (size_t i = 0; i < tokens.size(); ++i) {
    in.positions.push_back(static_cast<int32_t>(pos + i));
  }
  in.mask.resize(tokens.size() * cache_.n_ctx);
  FillLlamaMask(in.positions, cache_.n_ctx, absl::MakeSpan(in.mask));
  return in;
}

absl::Status LlamaRunner::CheckTokens(
    absl::Span<const int32_t> tokens) const {
  if (n_past_ + static_cast<int64_t>(tokens.size()) > cache_.n_ctx) {
    return absl::OutOfRangeError(
        absl::StrCat("[LlamaRunner] ", n_past_, " + ", tokens.size(),
                     " tokens do not fit in a cache of ", cache_.n_ctx));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= config_.n_vocab) {
      return Invalid("token ", t, " is outside the vocabulary of ",
                     config_.n_vocab);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> LlamaRunner::Process(
    absl::Span<const int32_t> tokens) {
  TESSERA_RETURN_IF_ERROR(CheckTokens(tokens));
  std::vector<float> logits(tokens.size() * config_.n_vocab);
  TESSERA_RETURN_IF_ERROR(Run(tokens, logits.data(), nullptr));
  return logits;
}

absl::StatusOr<int32_t> LlamaRunner::ProcessGreedy(
    absl::Span<const int32_t> tokens) {
  if (tokens.empty()) return Invalid("no tokens to process");
  TESSERA_RETURN_IF_ERROR(CheckTokens(tokens));
  int32_t next = 0;
  TESSERA_RETURN_IF_ERROR(Run(tokens, nullptr, &next));
  return next;
}

absl::Status LlamaRunner::Run(absl::Span<const int32_t> tokens, float* logits,
                              int32_t* next) {
  TESSERA_RETURN_IF_ERROR(client_ != nullptr
                              ? RunRemote(tokens, logits, next)
                              : RunLocal(tokens, logits, next));
  n_past_ += static_cast<int64_t>(tokens.size());
  return absl::OkStatus();
}

absl::Status LlamaRunner::RunLocal(absl::Span<const int32_t> tokens,
                                   float* logits, int32_t* next) {
  // Queue every micro-batch (pipelined over the devices), then wait.
  const int64_t n_vocab = config_.n_vocab;
  std::vector<float> last_row;  // for `next` without `logits`
  int64_t pos = n_past_;
  for (size_t begin = 0; begin < tokens.size();) {
    const int64_t n = std::min<int64_t>(options_.n_ubatch,
                                        tokens.size() - begin);
    TESSERA_ASSIGN_OR_RETURN(BatchGraph * g, GraphFor(n));
    LlamaForward& f = *g->fwd;
    if (allocated_ != g) {
      TESSERA_RETURN_IF_ERROR(sched_->AllocGraph(f.graph));
      allocated_ = g;
    }
    const BatchInputs in = MakeInputs(tokens.subspan(begin, n), pos);
    TESSERA_RETURN_IF_ERROR(f.tokens->buffer->SetTensor(
        *f.tokens, in.tokens.data(), 0, f.tokens->NumBytes()));
    TESSERA_RETURN_IF_ERROR(f.positions->buffer->SetTensor(
        *f.positions, in.positions.data(), 0, f.positions->NumBytes()));
    TESSERA_RETURN_IF_ERROR(f.cache_rows->buffer->SetTensor(
        *f.cache_rows, in.positions.data(), 0, f.cache_rows->NumBytes()));
    TESSERA_RETURN_IF_ERROR(
        f.mask->buffer->SetTensor(*f.mask, in.mask.data(), 0,
                                  f.mask->NumBytes()));
    TESSERA_RETURN_IF_ERROR(sched_->ComputeAsync(f.graph));
    begin += n;
    pos += n;
    if (logits != nullptr) {
      TESSERA_RETURN_IF_ERROR(sched_->GetTensorAsync(
          *f.logits, logits + (begin - n) * n_vocab, 0, f.logits->NumBytes()));
    } else if (next != nullptr && begin == tokens.size()) {
      last_row.resize(n_vocab);
      const size_t row_bytes = n_vocab * sizeof(float);
      TESSERA_RETURN_IF_ERROR(sched_->GetTensorAsync(
          *f.logits, last_row.data(), (n - 1) * row_bytes, row_bytes));
    }
  }
  TESSERA_RETURN_IF_ERROR(sched_->Synchronize());
  if (next != nullptr) {
    *next = logits != nullptr
                ? ArgmaxToken(absl::MakeConstSpan(
                      logits + (tokens.size() - 1) * n_vocab, n_vocab))
                : ArgmaxToken(last_row);
  }
  return absl::OkStatus();
}

absl::Status LlamaRunner::RunRemote(absl::Span<const int32_t> tokens,
                                    float* logits, int32_t* next) {
  // Executions of one registered graph are submitted back to back and
  // received in order; the stream is drained before another graph runs
  // (each graph has its own stream, and they share the cache). Each reads
  // back its logits when `logits` is wanted, the last one its ARGMAX when
  // `next` is, and otherwise nothing.
  struct Pending {
    BatchGraph* graph;
    float* logits;     // or null
    int32_t* argmax;   // [n_tokens], or null
  };
  std::vector<Pending> pending;
  std::vector<int32_t> argmax;  // the last micro-batch's
  auto drain = [&]() -> absl::Status {
    for (const Pending& p : pending) {
      const BatchGraph& g = *p.graph;
      std::vector<client::TensorOutput> outs;
      if (p.logits != nullptr) {
        outs.push_back({g.fwd->logits, p.logits, g.fwd->logits->NumBytes()});
      }
      if (p.argmax != nullptr) {
        outs.push_back({g.argmax, p.argmax, g.argmax->NumBytes()});
      }
      TESSERA_RETURN_IF_ERROR(g.remote->Receive(outs));
    }
    pending.clear();
    return absl::OkStatus();
  };
  int64_t pos = n_past_;
  for (size_t begin = 0; begin < tokens.size();) {
    const int64_t n = std::min<int64_t>(options_.n_ubatch,
                                        tokens.size() - begin);
    TESSERA_ASSIGN_OR_RETURN(BatchGraph * g, GraphFor(n));
    if (!pending.empty() && pending.back().graph != g) {
      TESSERA_RETURN_IF_ERROR(drain());
    }
    const BatchInputs in = MakeInputs(tokens.subspan(begin, n), pos);
    const LlamaForward& f = *g->fwd;
    const client::TensorInput inputs[] = {
        {f.tokens, in.tokens.data(), f.tokens->NumBytes()},
        {f.positions, in.positions.data(), f.positions->NumBytes()},
        {f.cache_rows, in.positions.data(), f.cache_rows->NumBytes()},
        {f.mask, in.mask.data(), f.mask->NumBytes()},
    };
    Pending p{g, nullptr, nullptr};
    std::vector<const Tensor*> outputs;
    if (logits != nullptr) {
      p.logits = logits + begin * config_.n_vocab;
      outputs.push_back(f.logits);
    }
    if (next != nullptr && begin + n == tokens.size()) {
      argmax.resize(n);
      p.argmax = argmax.data();
      outputs.push_back(g->argmax);
    }
    TESSERA_RETURN_IF_ERROR(g->remote->Submit(inputs, outputs));
    pending.push_back(p);
    begin += n;
    pos += n;
  }
  TESSERA_RETURN_IF_ERROR(drain());
  if (next != nullptr) *next = argmax.back();
  return absl::OkStatus();
}

int32_t ArgmaxToken(absl::Span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) -
                              row.begin());
}

absl::StatusOr<std::vector<int32_t>> GenerateGreedy(
    LlamaRunner& runner, absl::Span<const int32_t> prompt, int n_predict,
    const std::function<void(int32_t)>& on_token) {
  std::vector<int32_t> out;
  if (n_predict <= 0) return out;
  TESSERA_ASSIGN_OR_RETURN(int32_t next, runner.ProcessGreedy(prompt));
  for (int i = 0; i < n_predict; ++i) {
    out.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 < n_predict) {
      TESSERA_ASSIGN_OR_RETURN(next, runner.ProcessGreedy({next}));
    }
  }
  return out;
}

}  // namespace tessera
