// Tensor upload (WriteTensor) and download (ReadTensor) through tesserad
// versus raw TCP over 127.0.0.1 in the same run: one 256 MiB tensor (or
// --mib), and the same bytes as 8 MiB pieces, to the daemon's first device
// (or --device). Raw TCP moves the same bytes from and to memory
// of the same size (bench/loopback.h), and each tessera run is paired with
// a raw run right after it.
//
// With a ggml-rpc listener (the in-process daemon's, or --ggml_rpc_port of
// --target's host), the same through SET_TENSOR and GET_TENSOR, paired with
// raw runs the same way.
//
//   bazel run -c opt //bench:transfer [-- --reps=N --target=HOST:PORT
//                                         --ggml_rpc_port=PORT --mib=N
//                                         --device=NAME]
//
// Without --target the daemon is served in-process on an ephemeral port
// (cpu devices), so the bytes still cross a loopback TCP connection.

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_daemon.h"
#include "bench/ggml_rpc_bench.h"
#include "bench/loopback.h"
#include "client/client.h"
#include "base/status_macros.h"
#include "server/operations/process_tuning.h"
#include "spdlog/spdlog.h"

namespace tessera::bench {
namespace {

constexpr size_t kPiece = size_t{8} << 20;

struct Flags {
  int reps = 5;
  std::string target;
  int ggml_rpc_port = 0;
  size_t mib = 256;     // a multiple of kPiece's 8 MiB
  std::string device;   // empty: the daemon's first device
};

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

// Timings of the daemon and of raw TCP, taken in pairs one after the other
// so that both see the same state of a noisy machine.
struct Pairs {
  std::vector<double> tessera, raw;

  static double Best(const std::vector<double>& t) {
    return *std::min_element(t.begin(), t.end());
  }
  // The median over the pairs of raw time / tessera time.
  double MedianRatio() const {
    std::vector<double> r;
    for (size_t i = 0; i < tessera.size(); ++i) {
      r.push_back(raw[i] / tessera[i]);
    }
    return Percentile(r, 0.5);
  }
};

absl::Status Main(const Flags& flags) {
  const size_t kTotal = flags.mib << 20;
  TESSERA_ASSIGN_OR_RETURN(BenchDaemon daemon, StartBenchDaemon(flags.target));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client,
                           client::Client::Connect(daemon.target));
  TESSERA_ASSIGN_OR_RETURN(std::vector<v1::DeviceInfo> devices,
                           client->ListDevices());
  const std::string device =
      flags.device.empty() ? devices.at(0).name() : flags.device;
  TESSERA_ASSIGN_OR_RETURN(
      client::RemoteBufferInfo buffer,
      client->AllocBuffer(device, kTotal, BufferUsage::kWeights));
  std::vector<char> host(kTotal);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<char>(i * 31);
  std::vector<char> back(kTotal);

  auto transfer = [&](bool upload, size_t piece) -> absl::StatusOr<double> {
    const auto start = std::chrono::steady_clock::now();
    for (size_t off = 0; off < kTotal; off += piece) {
      v1::TensorRef ref;
      ref.set_buffer(buffer.handle);
      ref.set_offset(off);
      TESSERA_RETURN_IF_ERROR(
          upload ? client->WriteTensor(ref, host.data() + off, piece)
                 : client->ReadTensor(ref, back.data() + off, piece));
    }
    return Since(start);
  };
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Loopback> tcp,
                           Loopback::Open(kTotal));
  std::vector<char> raw_back(kTotal);
  // Seconds to move all kTotal bytes through `link` (Loopback or
  // GgmlRpcTransfer) `piece` bytes at a time, the bytes read into `into`.
  auto in_pieces = [&](auto& link, std::vector<char>& into, bool upload,
                       size_t piece) -> absl::StatusOr<double> {
    double total = 0;
    for (size_t off = 0; off < kTotal; off += piece) {
      TESSERA_ASSIGN_OR_RETURN(
          double t, upload ? link.Upload(host.data() + off, off, piece)
                           : link.Download(into.data() + off, off, piece));
      total += t;
    }
    return total;
  };
  auto raw = [&](bool upload, size_t piece) {
    return in_pieces(*tcp, raw_back, upload, piece);
  };

  absl::PrintF(
      "transfer of %d MiB to and from %s on %s, %d pairs of runs\n"
      "GB/s: the best run; ratio: raw TCP time / tessera time, of the best "
      "runs and the median over the pairs\n\n",
      flags.mib, device, daemon.Describe(), flags.reps);
  absl::PrintF("%-30s %12s %12s %10s %12s\n", "case", "tessera GB/s",
               "raw TCP GB/s", "best/best", "median pair");
  std::unique_ptr<GgmlRpcTransfer> ggml;
  const int ggml_port =
      flags.ggml_rpc_port != 0 ? flags.ggml_rpc_port : daemon.ggml_rpc_port;
  if (ggml_port != 0) {
    TESSERA_ASSIGN_OR_RETURN(ggml, GgmlRpcTransfer::Open(ggml_port, kTotal));
  }
  std::vector<char> ggml_back(ggml != nullptr ? kTotal : 0);
  auto ggml_transfer = [&](bool upload, size_t piece) {
    return in_pieces(*ggml, ggml_back, upload, piece);
  };
  for (bool ggml_rpc : {false, true}) {
  if (ggml_rpc && ggml == nullptr) break;
  for (bool upload : {true, false}) {
    for (size_t piece : {kTotal, kPiece}) {
      Pairs pairs;
      for (int r = 0; r < flags.reps; ++r) {
        TESSERA_ASSIGN_OR_RETURN(double t, ggml_rpc
                                               ? ggml_transfer(upload, piece)
                                               : transfer(upload, piece));
        TESSERA_ASSIGN_OR_RETURN(double w, raw(upload, piece));
        pairs.tessera.push_back(t);
        pairs.raw.push_back(w);
      }
      const double t = Pairs::Best(pairs.tessera);
      const double w = Pairs::Best(pairs.raw);
      const std::string name =
          absl::StrCat(ggml_rpc ? "ggml-rpc " : "",
                       upload ? "upload " : "download ",
                       piece == kTotal
                           ? absl::StrCat("1 x ", flags.mib, " MiB")
                           : absl::StrCat(kTotal / kPiece, " x 8 MiB"));
      absl::PrintF("%-30s %12.2f %12.2f %10.2f %12.2f\n", name,
                   kTotal / t / 1e9, kTotal / w / 1e9, w / t,
                   pairs.MedianRatio());
    }
  }
  }
  if (std::memcmp(host.data(), back.data(), kTotal) != 0 ||
      std::memcmp(host.data(), raw_back.data(), kTotal) != 0 ||
      (ggml != nullptr &&
       std::memcmp(host.data(), ggml_back.data(), kTotal) != 0)) {
    return absl::DataLossError("downloaded bytes differ from the upload");
  }
  absl::PrintF("\ndownloaded bytes equal the upload\n");
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::server::TuneProcess();
  spdlog::set_level(spdlog::level::warn);
  tessera::bench::Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--reps=", 0) == 0) {
      flags.reps = std::max(1, std::atoi(arg.c_str() + 7));
    } else if (arg.rfind("--target=", 0) == 0) {
      flags.target = arg.substr(9);
    } else if (arg.rfind("--ggml_rpc_port=", 0) == 0) {
      flags.ggml_rpc_port = std::atoi(arg.c_str() + 16);
    } else if (arg.rfind("--mib=", 0) == 0 && std::atoi(arg.c_str() + 6) > 0 &&
               std::atoi(arg.c_str() + 6) % 8 == 0) {
      flags.mib = std::atoi(arg.c_str() + 6);
    } else if (arg.rfind("--device=", 0) == 0) {
      flags.device = arg.substr(9);
    } else {
      absl::FPrintF(stderr, "usage: transfer [--reps=N] [--target=HOST:PORT] "
                    "[--ggml_rpc_port=PORT] [--mib=N (a multiple of 8)] "
                    "[--device=NAME]\n");
      return 2;
    }
  }
  if (absl::Status s = tessera::bench::Main(flags); !s.ok()) {
    absl::FPrintF(stderr, "transfer: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
