// tessera: a command-line tool for a tesserad daemon.
//
//   tessera [flags] devices          the daemon's devices and memory
//   tessera [flags] ping             Hello round trips, in microseconds
//   tessera [flags] upload FILE      FILE into a new buffer, with progress;
//                                    content the daemon already has (same
//                                    hash) is not sent again
//   tessera [flags] bench            upload/download rate (--bench_mib,
//                                    default 256 MiB)
//   tessera run --model=FILE.gguf --prompt_tokens=1,2,3 [--n_predict=16]
//       [--remote=HOST:PORT[,HOST:PORT...]] [--pp=P] [--tp=N] [--threads=N]
//       [--n_ctx=N] [--n_ubatch=N]
//       [--cache_type=f16|f32|bf16|q8_0|q4_0|q4_1|q5_0|q5_1]
//                                    greedy generation with a LLaMA GGUF
//                                    model, locally (one CPU device; P with
//                                    layers spread over them; tensor
//                                    parallel over N CPU devices grouped
//                                    by a meta device, per stage with P),
//                                    on a daemon, or tensor parallel over
//                                    the --device of each of several
//                                    daemons; generated token ids on
//                                    stdout, progress and tokens/s on
//                                    stderr
//
// Flags (each also read from TESSERA_<NAME>): --target=HOST:PORT (default
// 127.0.0.1:50051), --device=NAME (default: the first), --token_file=PATH,
// --tls_ca=PEM (enables TLS), --tls_cert=PEM --tls_key=PEM (mutual TLS),
// --tls_server_name=NAME.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "backend/assembly/device_spec.h"
#include "backend/comm/communicator.h"
#include "backend/comm/host_communicator.h"
#include "backend/meta/llama_policy.h"
#include "backend/meta/meta_device.h"
#include "backend/registry.h"
#include "base/flag_file.h"
#include "base/status_macros.h"
#include "client/client.h"
#include "client/remote_device.h"
#include "client/spanning_communicator.h"
#include "graph/context.h"
#include "graph/type.h"
#include "grpc/grpc.h"
#include "model/gguf_reader.h"
#include "model/llama.h"
#include "proto/content_hash.h"
#include "runner/llama_runner.h"

namespace tessera::client {
namespace {

constexpr char kUsage[] =
    "usage: tessera [flags] devices | ping | upload FILE | bench\n"
    "       tessera run --model=FILE.gguf --prompt_tokens=1,2,3 "
    "[--n_predict=16]\n"
    "           [--remote=HOST:PORT[,HOST:PORT...]] [--pp=P] [--tp=N] "
    "[--threads=N] "
    "[--n_ctx=N] "
    "[--n_ubatch=N]\n"
    "           [--cache_type=f16|f32|bf16|q8_0|q4_0|q4_1|q5_0|q5_1]\n"
    "             (the KV cache's type)\n"
    "flags (or TESSERA_<NAME> in the environment):\n"
    "  --target=HOST:PORT      daemon address (default 127.0.0.1:50051)\n"
    "  --device=NAME           device for upload and bench (default: first)\n"
    "  --bench_mib=N           MiB that bench moves each way (default 256)\n"
    "  --token_file=PATH       bearer token file\n"
    "  --tls_ca=PEM            CA of the daemon's certificate; enables TLS\n"
    "  --tls_cert=PEM          client certificate (mutual TLS)\n"
    "  --tls_key=PEM           client key (mutual TLS)\n"
    "  --tls_server_name=NAME  name the daemon's certificate must carry\n";

struct Flags {
  std::map<std::string, std::string> values;
  std::vector<std::string> args;

  std::string Get(const std::string& name, const std::string& fallback) const {
    if (auto it = values.find(name); it != values.end()) return it->second;
    const std::string var = "TESSERA_" + absl::AsciiStrToUpper(name);
    if (const char* env = std::getenv(var.c_str()); env != nullptr) return env;
    return fallback;
  }
};

absl::StatusOr<std::unique_ptr<Client>> ConnectFromFlags(const Flags& flags) {
  ClientOptions options;
  options.name = "tessera-cli";
  options.connect_timeout = absl::Seconds(10);
  if (std::string path = flags.Get("token_file", ""); !path.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::string token,
                             ReadFlagFile("token_file", path));
    options.token = std::string(
        absl::StripAsciiWhitespace(token.substr(0, token.find('\n'))));
  }
  if (std::string ca = flags.Get("tls_ca", ""); !ca.empty()) {
    options.tls = true;
    TESSERA_ASSIGN_OR_RETURN(options.tls_root_certs,
                             ReadFlagFile("tls_ca", ca));
  }
  if (std::string cert = flags.Get("tls_cert", ""); !cert.empty()) {
    options.tls = true;
    TESSERA_ASSIGN_OR_RETURN(options.tls_client_cert,
                             ReadFlagFile("tls_cert", cert));
    TESSERA_ASSIGN_OR_RETURN(options.tls_client_key,
                             ReadFlagFile("tls_key", flags.Get("tls_key", "")));
  }
  options.tls_server_name = flags.Get("tls_server_name", "");
  return Client::Connect(flags.Get("target", "127.0.0.1:50051"), options);
}

absl::StatusOr<std::string> PickDevice(Client& client, const Flags& flags) {
  if (std::string device = flags.Get("device", ""); !device.empty()) {
    return device;
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<v1::DeviceInfo> devices,
                           client.ListDevices());
  if (devices.empty()) return absl::NotFoundError("the daemon has no devices");
  return devices[0].name();
}

std::string Mib(uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

absl::Status Devices(Client& client) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<v1::DeviceInfo> devices,
                           client.ListDevices());
  absl::PrintF("%-10s %-6s %14s %14s  %s\n", "device", "type", "free", "total",
               "description");
  for (const v1::DeviceInfo& d : devices) {
    absl::PrintF("%-10s %-6s %14s %14s  %s\n", d.name(),
                 v1::DeviceInfo::Type_Name(d.type()), Mib(d.memory_free()),
                 Mib(d.memory_total()), d.description());
  }
  return absl::OkStatus();
}

absl::Status Ping(Client& client) {
  std::vector<double> us;
  for (int i = 0; i < 10; ++i) {
    const absl::Time start = absl::Now();
    TESSERA_RETURN_IF_ERROR(client.ListDevices().status());
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  std::sort(us.begin(), us.end());
  absl::PrintF(
      "%s (%s): 10 round trips, min %.0f us, median %.0f us, max %.0f us\n",
      client.server_version(), client.session(), us.front(), us[us.size() / 2],
      us.back());
  return absl::OkStatus();
}

// A one-line progress bar on stderr: bytes, percent and rate.
class Progress {
 public:
  explicit Progress(uint64_t total) : total_(total), start_(absl::Now()) {}
  void Show(uint64_t done) {
    const double seconds =
        std::max(1e-6, absl::ToDoubleSeconds(absl::Now() - start_));
    const int width = 30;
    const int filled =
        total_ == 0 ? width : static_cast<int>(width * done / total_);
    absl::FPrintF(stderr, "\r[%s%s] %s / %s  %3d%%  %.2f GB/s",
                  std::string(filled, '#'), std::string(width - filled, ' '),
                  Mib(done), Mib(total_),
                  total_ == 0 ? 100 : static_cast<int>(100 * done / total_),
                  done / seconds / 1e9);
  }
  void End() { absl::FPrintF(stderr, "\n"); }

 private:
  const uint64_t total_;
  const absl::Time start_;
};

absl::Status Upload(Client& client, const Flags& flags,
                    const std::string& file) {
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (fd >= 0) close(fd);
    return absl::NotFoundError(absl::StrCat(file, ": cannot be read"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  void* data =
      size == 0 ? nullptr : mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (data == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(file, ": cannot be mapped"));
  }
  TESSERA_ASSIGN_OR_RETURN(std::string device, PickDevice(client, flags));
  TESSERA_ASSIGN_OR_RETURN(
      RemoteBufferInfo buffer,
      client.AllocBuffer(device, std::max<uint64_t>(size, 1),
                         BufferUsage::kWeights));
  const absl::Time start = absl::Now();
  const wire::ContentHash hash = wire::HashContent(
      data, size, static_cast<int>(std::thread::hardware_concurrency()));
  const double hash_s = absl::ToDoubleSeconds(absl::Now() - start);
  v1::TensorRef ref;
  ref.set_buffer(buffer.handle);
  TESSERA_ASSIGN_OR_RETURN(bool found,
                           client.WriteTensorByHash(ref, size, hash));
  if (found) {
    absl::PrintF(
        "%s: %s on %s, buffer %d: the daemon had it (hash %s); no "
        "bytes sent\n",
        file, Mib(size), device, buffer.handle, hash.Hex());
  } else {
    Progress progress(size);
    WriteOptions options{
        .hash = &hash, .progress = [&](uint64_t done) { progress.Show(done); }};
    absl::Status s = client.WriteTensor(ref, data, size, options);
    progress.End();
    TESSERA_RETURN_IF_ERROR(s);
    absl::PrintF("%s: %s sent to %s, buffer %d (hash %s)\n", file, Mib(size),
                 device, buffer.handle, hash.Hex());
  }
  absl::PrintF(
      "hashed at %.2f GB/s; the daemon keeps the content under "
      "its hash, so later loads of it send no bytes\n",
      size / std::max(hash_s, 1e-9) / 1e9);
  if (data != nullptr) munmap(data, size);
  return absl::OkStatus();
}

absl::Status Bench(Client& client, const Flags& flags) {
  uint64_t mib = 0;
  if (!absl::SimpleAtoi(flags.Get("bench_mib", "256"), &mib) || mib == 0 ||
      mib > (uint64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        "--bench_mib: must be a whole number of MiB, 1 to 16777216");
  }
  const uint64_t bytes = mib << 20;
  TESSERA_ASSIGN_OR_RETURN(std::string device, PickDevice(client, flags));
  TESSERA_ASSIGN_OR_RETURN(
      RemoteBufferInfo buffer,
      client.AllocBuffer(device, bytes, BufferUsage::kWeights));
  std::vector<char> host(bytes, 1), back(bytes);
  v1::TensorRef ref;
  ref.set_buffer(buffer.handle);
  absl::PrintF("%-10s %10s\n", device, "GB/s");
  for (bool upload : {true, false}) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const absl::Time start = absl::Now();
      TESSERA_RETURN_IF_ERROR(upload
                                  ? client.WriteTensor(ref, host.data(), bytes)
                                  : client.ReadTensor(ref, back.data(), bytes));
      best = std::min(best, absl::ToDoubleSeconds(absl::Now() - start));
    }
    absl::PrintF("%-10s %10.2f\n", upload ? "upload" : "download",
                 bytes / best / 1e9);
  }
  return client.FreeBuffer(buffer.handle);
}

absl::StatusOr<int64_t> IntFlag(const Flags& flags, const std::string& name,
                                int64_t fallback) {
  const std::string text = flags.Get(name, "");
  if (text.empty()) return fallback;
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, "=", text, " is not an integer"));
  }
  return value;
}

// The type that --`name` names (f32, f16, q8_0, ...), or `fallback` when
// the flag is absent.
absl::StatusOr<Type> TypeFlag(const Flags& flags, const std::string& name,
                              Type fallback) {
  const std::string text = flags.Get(name, "");
  if (text.empty()) return fallback;
  if (std::optional<Type> type = TypeNamed(text)) return *type;
  return absl::InvalidArgumentError(
      absl::StrCat("--", name, "=", text, " is not a type name"));
}

// The head-aligned split of `file`'s LLaMA over tensor-parallel members:
// whole heads (in groups of the GQA ratio for Q and O), FFN splits in whole
// blocks of ffn_down's type.
absl::StatusOr<LlamaSplitOptions> TpSplitOptions(const GgufFile& file) {
  TESSERA_ASSIGN_OR_RETURN(LlamaConfig config, LlamaConfig::FromGguf(file));
  Context ctx;
  TESSERA_ASSIGN_OR_RETURN(LlamaWeights weights,
                           LlamaWeights::FromGguf(file, config, ctx));
  LlamaSplitOptions o;
  o.head_dim = config.head_dim();
  o.gqa_ratio = config.n_head / config.n_head_kv;
  o.ffn_granularity = Traits(weights.layers[0].ffn_down->type).block_size;
  return o;
}

// The device named `name` (empty: the first) of the daemon at `daemon`.
absl::StatusOr<std::unique_ptr<RemoteDevice>> FindRemoteDevice(
    Client& client, const std::string& daemon, const std::string& name) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<RemoteDevice>> devices,
                           RemoteDevice::ListAll(client));
  for (std::unique_ptr<RemoteDevice>& d : devices) {
    if (name.empty() || d->remote_name() == name) return std::move(d);
  }
  return absl::NotFoundError(absl::StrCat("--device: the daemon at ", daemon,
                                          " has no device \"", name, "\""));
}

// The communicator of a tensor-parallel group over devices of several
// daemons: the daemons' own (NCCL, GPU to GPU) when every member is a GPU,
// else the host communicator, through this process's memory.
absl::StatusOr<std::unique_ptr<Communicator>> SpanningTpCommunicator(
    const std::vector<std::unique_ptr<RemoteDevice>>& remotes, bool all_gpus) {
  if (all_gpus) {
    std::vector<RemoteDevice*> members;
    for (const auto& r : remotes) members.push_back(r.get());
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<SpanningCommunicator> comm,
                             SpanningCommunicator::Create(members));
    return std::unique_ptr<Communicator>(std::move(comm));
  }
  std::vector<Device*> members;
  for (const auto& r : remotes) members.push_back(r.get());
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<HostCommunicator> comm,
                           HostCommunicator::Create(members));
  return std::unique_ptr<Communicator>(std::move(comm));
}

// `tessera run`: greedy generation with a LLaMA GGUF model.
absl::Status RunModel(const Flags& flags) {
  const std::string model = flags.Get("model", "");
  if (model.empty()) return absl::InvalidArgumentError("--model is required");
  std::vector<int32_t> prompt;
  for (absl::string_view t :
       absl::StrSplit(flags.Get("prompt_tokens", ""), ',', absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(t, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt_tokens: \"", t, "\" is not a token id"));
    }
    prompt.push_back(id);
  }
  if (prompt.empty()) {
    return absl::InvalidArgumentError("--prompt_tokens is required");
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t n_predict,
                           IntFlag(flags, "n_predict", 16));
  TESSERA_ASSIGN_OR_RETURN(const int64_t pp, IntFlag(flags, "pp", 1));
  TESSERA_ASSIGN_OR_RETURN(const int64_t tp, IntFlag(flags, "tp", 1));
  TESSERA_ASSIGN_OR_RETURN(const int64_t threads, IntFlag(flags, "threads", 0));
  LlamaRunnerOptions options;
  TESSERA_ASSIGN_OR_RETURN(options.n_ctx, IntFlag(flags, "n_ctx", 0));
  TESSERA_ASSIGN_OR_RETURN(options.n_ubatch, IntFlag(flags, "n_ubatch", 32));
  TESSERA_ASSIGN_OR_RETURN(options.cache_type,
                           TypeFlag(flags, "cache_type", Type::kF16));
  if (options.n_ctx == 0) {
    options.n_ctx = static_cast<int64_t>(prompt.size()) + n_predict;
  }
  const std::string remote = flags.Get("remote", "");
  const std::vector<std::string> daemons =
      absl::StrSplit(remote, ',', absl::SkipEmpty());
  if (pp < 1 || (!remote.empty() && pp != 1)) {
    return absl::InvalidArgumentError("--pp must be >= 1, and 1 with --remote");
  }
  if (tp < 1 || (daemons.size() == 1 && tp != 1) ||
      (daemons.size() > 1 && tp != 1 &&
       tp != static_cast<int64_t>(daemons.size()))) {
    return absl::InvalidArgumentError(
        "--tp must be >= 1; with --remote, 1 or the number of daemons");
  }

  const absl::Time t0 = absl::Now();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file,
                           GgufFile::Open(model));
  Registry registry;
  // Tensor parallel: per stage, a communicator and a meta device over tp
  // devices (they outlive the runner).
  // Sessions and their devices outlive what is made of them.
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<RemoteDevice>> remotes;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<MetaDevice>> metas;
  std::unique_ptr<LlamaRunner> runner;
  if (daemons.size() > 1) {
    // One device of each daemon, tensor parallel under a meta device here.
    std::vector<Device*> members;
    bool all_gpus = true;
    for (const std::string& daemon : daemons) {
      Flags connect = flags;
      connect.values["target"] = daemon;
      TESSERA_ASSIGN_OR_RETURN(clients.emplace_back(),
                               ConnectFromFlags(connect));
      TESSERA_ASSIGN_OR_RETURN(
          remotes.emplace_back(),
          FindRemoteDevice(*clients.back(), daemon, flags.Get("device", "")));
      members.push_back(remotes.back().get());
      all_gpus &= remotes.back()->remote_type() == DeviceType::kGpu;
    }
    TESSERA_ASSIGN_OR_RETURN(comms.emplace_back(),
                             SpanningTpCommunicator(remotes, all_gpus));
    TESSERA_ASSIGN_OR_RETURN(LlamaSplitOptions split, TpSplitOptions(*file));
    TESSERA_ASSIGN_OR_RETURN(
        metas.emplace_back(),
        MetaDevice::Create(
            "tp", members, *comms.back(),
            LlamaSplitPolicy(static_cast<int>(members.size()), split)));
    TESSERA_RETURN_IF_ERROR(AddDevices("cpu", 1, registry));
    TESSERA_ASSIGN_OR_RETURN(
        runner, LlamaRunner::CreateLocal(*file, {metas.back().get()}, options,
                                         registry.devices()[0]));
  } else if (!remote.empty()) {
    Flags connect = flags;
    connect.values["target"] = remote;
    TESSERA_ASSIGN_OR_RETURN(clients.emplace_back(), ConnectFromFlags(connect));
    // A daemon's meta device splits the model as local tp does.
    options.prepare_remote =
        [model = file.get()](RemoteDevice& device) -> absl::Status {
      if (!device.is_meta()) return absl::OkStatus();
      TESSERA_ASSIGN_OR_RETURN(LlamaSplitOptions split, TpSplitOptions(*model));
      const int n = static_cast<int>(device.Props().members.size());
      return device.SetSplitPolicy(LlamaSplitPolicy(n, split));
    };
    TESSERA_ASSIGN_OR_RETURN(
        runner, LlamaRunner::CreateRemote(*file, *clients.back(),
                                          flags.Get("device", ""), options));
  } else if (tp > 1) {
    // pp x tp CPU devices as members, and one more as the fallback.
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int per_device = threads > 0 ? static_cast<int>(threads)
                                       : std::max<int>(1, cores / (pp * tp));
    TESSERA_RETURN_IF_ERROR(
        AddDevices(absl::StrCat("cpu:", pp * tp), per_device, registry));
    TESSERA_RETURN_IF_ERROR(AddDevices("cpu", 1, registry));
    TESSERA_ASSIGN_OR_RETURN(LlamaSplitOptions split, TpSplitOptions(*file));
    const std::vector<Device*> cpus(registry.devices().begin(),
                                    registry.devices().end());
    std::vector<Device*> stages;
    for (int64_t g = 0; g < pp; ++g) {
      std::vector<Device*> members(cpus.begin() + g * tp,
                                   cpus.begin() + (g + 1) * tp);
      TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<HostCommunicator> comm,
                               HostCommunicator::Create(members));
      TESSERA_ASSIGN_OR_RETURN(
          std::unique_ptr<MetaDevice> meta,
          MetaDevice::Create(absl::StrCat("tp", g), members, *comm,
                             LlamaSplitPolicy(static_cast<int>(tp), split)));
      comms.push_back(std::move(comm));
      stages.push_back(meta.get());
      metas.push_back(std::move(meta));
    }
    TESSERA_ASSIGN_OR_RETURN(
        runner,
        LlamaRunner::CreateLocal(*file, stages, options, cpus[pp * tp]));
  } else {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int per_device =
        threads > 0 ? static_cast<int>(threads) : std::max<int>(1, cores / pp);
    TESSERA_RETURN_IF_ERROR(
        AddDevices(pp == 1 ? std::string("cpu") : absl::StrCat("cpu:", pp),
                   per_device, registry));
    std::vector<Device*> devices(registry.devices().begin(),
                                 registry.devices().end());
    TESSERA_ASSIGN_OR_RETURN(runner,
                             LlamaRunner::CreateLocal(*file, devices, options));
  }
  const LlamaConfig& c = runner->config();
  uint64_t cache_bytes = 0;
  for (const std::vector<Tensor*>* part :
       {&runner->cache().k, &runner->cache().v}) {
    for (const Tensor* t : *part) cache_bytes += t->NumBytes();
  }
  absl::FPrintF(stderr,
                "tessera run: %d layers, n_embd %d, %d heads (%d kv), vocab "
                "%d; %.1f MiB of weights loaded in %.2f s; KV cache %s, %d "
                "positions, %.2f MiB (%s)\n",
                c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.n_vocab,
                runner->weight_bytes() / 1048576.0,
                absl::ToDoubleSeconds(absl::Now() - t0),
                TypeName(runner->cache().k[0]->type), runner->n_ctx(),
                cache_bytes / 1048576.0,
                remote.empty()
                    ? absl::StrCat("local, ", pp, " stage(s) x tp ", tp)
                    : absl::StrCat("remote ", remote));
  const absl::Time t1 = absl::Now();
  absl::Time first = t1;
  int64_t n = 0;
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<int32_t> tokens,
      GenerateGreedy(
          *runner, prompt, static_cast<int>(n_predict), [&](int32_t token) {
            if (n++ == 0) first = absl::Now();
            absl::FPrintF(stderr, "\rtessera run: %d/%d tokens", n, n_predict);
          }));
  const absl::Time t2 = absl::Now();
  const double prompt_s = absl::ToDoubleSeconds(first - t1);
  const double decode_s = absl::ToDoubleSeconds(t2 - first);
  absl::FPrintF(stderr,
                "\ntessera run: prompt %d tokens in %.3f s (%.1f tokens/s); "
                "decode %d tokens in %.3f s (%.1f tokens/s)\n",
                prompt.size(), prompt_s, prompt.size() / prompt_s,
                tokens.size() - 1, decode_s,
                tokens.size() > 1 ? (tokens.size() - 1) / decode_s : 0.0);
  absl::PrintF("%s\n", absl::StrJoin(tokens, ","));
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      absl::PrintF("%s", kUsage);
      return 0;
    }
    if (absl::StartsWith(arg, "--")) {
      const size_t eq = arg.find('=');
      if (eq == std::string::npos) {
        absl::FPrintF(stderr, "tessera: %s needs =VALUE\n%s", arg, kUsage);
        return 2;
      }
      flags.values[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
    } else {
      flags.args.push_back(arg);
    }
  }
  const std::vector<std::string>& args = flags.args;
  if (args.size() == 1 && args[0] == "run") {
    absl::Status s = RunModel(flags);
    if (!s.ok()) {
      absl::FPrintF(stderr, "tessera run: %s\n", s.ToString());
      return 1;
    }
    return 0;
  }
  const bool known =
      (args.size() == 1 &&
       (args[0] == "devices" || args[0] == "ping" || args[0] == "bench")) ||
      (args.size() == 2 && args[0] == "upload");
  if (!known) {
    absl::FPrintF(stderr, "%s", kUsage);
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Client>> client = ConnectFromFlags(flags);
  if (!client.ok()) {
    absl::FPrintF(stderr, "tessera: %s\n", client.status().message());
    return 1;
  }
  absl::Status s = args[0] == "devices" ? Devices(**client)
                   : args[0] == "ping"  ? Ping(**client)
                   : args[0] == "bench" ? Bench(**client, flags)
                                        : Upload(**client, flags, args[1]);
  if (!s.ok()) {
    absl::FPrintF(stderr, "tessera %s: %s\n", args[0], s.ToString());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tessera::client

int main(int argc, char** argv) {
  // gRPC's own threads may still be retrying a failed connection when Main
  // returns; shutting gRPC down first keeps them away from exit's cleanup.
  grpc_init();
  const int code = tessera::client::Main(argc, argv);
  grpc_shutdown_blocking();
  return code;
}
