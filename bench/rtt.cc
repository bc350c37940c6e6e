// Round trip of a small compute through tesserad: a 1-op graph and a
// 100-op chain on 16 floats, reading the 64-byte result, as one-shot
// Compute and as a registered graph's Execute, with a 64-byte TCP
// ping-pong over 127.0.0.1 and the floor of any gRPC round trip (a 64-byte
// echo on an open stream, bench/grpc_echo.h) in the same run.
//
// With a ggml-rpc listener (the in-process daemon's, or --ggml_rpc_port of
// --target's host), llama.cpp's reused-graph round trip (GRAPH_RECOMPUTE
// of a 1-op graph + a 64-byte GET_TENSOR) against a plain TCP_NODELAY
// ping-pong of 64 bytes (bench/tcp_ping_pong.h) in the same run.
//
//   bazel run -c opt //bench:rtt [-- --n=N --target=HOST:PORT
//                                    --ggml_rpc_port=PORT]

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_daemon.h"
#include "bench/ggml_rpc_bench.h"
#include "bench/tcp_ping_pong.h"
#include "bench/grpc_echo.h"
#include "bench/loopback.h"
#include "client/client.h"
#include "client/remote_device.h"
#include "client/remote_graph.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "base/status_macros.h"
#include "backend/alloc/tensor_allocator.h"
#include "server/operations/process_tuning.h"
#include "spdlog/spdlog.h"

namespace tessera::bench {
namespace {

constexpr int64_t kElems = 16;  // 64 bytes of F32

struct Row {
  std::string name;
  double median_us = 0;
  double p99_us = 0;
};

absl::StatusOr<Row> Measure(const std::string& name, int n,
                            const std::function<absl::Status()>& op) {
  for (int i = 0; i < std::min(n / 10 + 1, 50); ++i) {
    TESSERA_RETURN_IF_ERROR(op());
  }
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto start = std::chrono::steady_clock::now();
    TESSERA_RETURN_IF_ERROR(op());
    us.push_back(std::chrono::duration<double, std::micro>(
                     std::chrono::steady_clock::now() - start)
                     .count());
  }
  return Row{name, Percentile(us, 0.5), Percentile(us, 0.99)};
}

// The ggml-rpc row and its plain TCP ping-pong, each median over the
// other's.
absl::Status PrintGgmlRpc(int port, int n) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> rpc, GgmlRpcRecompute(port, n));
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> tcp, TcpPingPong(64, n));
  for (double& s : rpc) s *= 1e6;
  for (double& s : tcp) s *= 1e6;
  const Row rows[] = {
      {"ggml-rpc RECOMPUTE+GET 64B", Percentile(rpc, 0.5),
       Percentile(rpc, 0.99)},
      {"plain TCP ping-pong, 64 B", Percentile(tcp, 0.5),
       Percentile(tcp, 0.99)},
  };
  absl::PrintF("\nggml-rpc on port %d, %d samples\n\n", port, n);
  absl::PrintF("%-28s %12s %12s %14s\n", "case", "median us", "p99 us",
               "median / plain");
  for (const Row& row : rows) {
    absl::PrintF("%-28s %12.1f %12.1f %14.2f\n", row.name, row.median_us,
                 row.p99_us, row.median_us / rows[1].median_us);
  }
  return absl::OkStatus();
}

absl::Status Main(int n, const std::string& target_flag, int ggml_rpc_port) {
  TESSERA_ASSIGN_OR_RETURN(BenchDaemon daemon, StartBenchDaemon(target_flag));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client,
                           client::Client::Connect(daemon.target));
  TESSERA_ASSIGN_OR_RETURN(auto devices,
                           client::RemoteDevice::ListAll(*client));

  // c lives on the daemon; x is sent with each request.
  Context ctx;
  TESSERA_ASSIGN_OR_RETURN(Tensor * c, ctx.NewTensor(Type::kF32, {kElems}));
  c->name = "c";
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> weights,
                           AllocTensors(devices[0]->buffer_type(), {c}));
  std::vector<float> ones(kElems, 1.0f);
  TESSERA_RETURN_IF_ERROR(c->buffer->SetTensor(*c, ones.data(), 0, 64));
  TESSERA_ASSIGN_OR_RETURN(Tensor * x, ctx.NewTensor(Type::kF32, {kElems}));
  x->name = "x";
  std::vector<float> input(kElems, 0.5f), result(kElems);

  std::vector<Row> rows;
  for (int ops : {1, 100}) {
    Tensor* y = x;
    for (int i = 0; i < ops; ++i) {
      TESSERA_ASSIGN_OR_RETURN(y, Add(ctx, y, c));
    }
    y->flags |= kFlagOutput;
    Graph graph;
    TESSERA_RETURN_IF_ERROR(graph.Expand(y));
    const std::vector<client::TensorInput> in = {{x, input.data(), 64}};
    const std::vector<client::TensorOutput> out = {{y, result.data(), 64}};
    auto check = [&]() -> absl::Status {
      if (result[0] != 0.5f + ops) {
        return absl::InternalError(absl::StrCat("wrong result ", result[0]));
      }
      return absl::OkStatus();
    };
    TESSERA_ASSIGN_OR_RETURN(
        Row compute,
        Measure(absl::StrCat("Compute, ", ops, "-op graph"), n / 2,
                [&]() -> absl::Status {
                  TESSERA_RETURN_IF_ERROR(client->Compute(graph, in, out));
                  return check();
                }));
    rows.push_back(compute);
    TESSERA_ASSIGN_OR_RETURN(
        std::unique_ptr<client::RemoteGraph> registered,
        client::RemoteGraph::Register(*client, graph, {.n_copies = 1}));
    TESSERA_ASSIGN_OR_RETURN(
        Row execute, Measure(absl::StrCat("Execute, ", ops, "-op graph"), n,
                             [&]() -> absl::Status {
                               TESSERA_RETURN_IF_ERROR(
                                   registered->Run(in, out));
                               return check();
                             }));
    rows.push_back(execute);
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Loopback> tcp, Loopback::Open());
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> pings, tcp->PingPong(64, n));
  for (double& s : pings) s *= 1e6;
  const Row ping{"TCP ping-pong, 64 bytes", Percentile(pings, 0.5),
                 Percentile(pings, 0.99)};
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> echoes, GrpcEcho(64, n));
  for (double& s : echoes) s *= 1e6;
  rows.push_back(Row{"gRPC stream echo, 64 bytes", Percentile(echoes, 0.5),
                     Percentile(echoes, 0.99)});

  absl::PrintF("round trips to %s, %d samples (Compute: %d)\n\n",
               daemon.Describe(), n, n / 2);
  absl::PrintF("%-28s %12s %12s %14s\n", "case", "median us", "p99 us",
               "median / TCP");
  for (const Row& row : rows) {
    absl::PrintF("%-28s %12.1f %12.1f %14.2f\n", row.name, row.median_us,
                 row.p99_us, row.median_us / ping.median_us);
  }
  absl::PrintF("%-28s %12.1f %12.1f %14.2f\n", ping.name, ping.median_us,
               ping.p99_us, 1.0);
  if (ggml_rpc_port == 0) ggml_rpc_port = daemon.ggml_rpc_port;
  if (ggml_rpc_port != 0) return PrintGgmlRpc(ggml_rpc_port, n);
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::server::TuneProcess();
  spdlog::set_level(spdlog::level::warn);
  int n = 2000;
  std::string target;
  int ggml_rpc_port = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--n=", 0) == 0) {
      n = std::max(10, std::atoi(arg.c_str() + 4));
    } else if (arg.rfind("--target=", 0) == 0) {
      target = arg.substr(9);
    } else if (arg.rfind("--ggml_rpc_port=", 0) == 0) {
      ggml_rpc_port = std::atoi(arg.c_str() + 16);
    } else {
      absl::FPrintF(stderr,
                    "usage: rtt [--n=N] [--target=HOST:PORT] "
                    "[--ggml_rpc_port=PORT]\n");
      return 2;
    }
  }
  if (absl::Status s = tessera::bench::Main(n, target, ggml_rpc_port); !s.ok()) {
    absl::FPrintF(stderr, "rtt: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
