// Round trip of a small compute through tesserad, each daemon a process
// of its own: a 1-op graph and a 100-op chain on 16 floats, reading the
// 64-byte result, as one-shot Compute and as a registered graph's Execute
// over TCP and over a Unix socket; 100-op executions one at a time and 8 in
// flight on one stream (client::RemoteGraph sends those it holds together,
// and the daemon answers those done together); and in the same run the
// floor of any gRPC round trip (a 64-byte echo on an open stream,
// bench/grpc_echo.h) and a 64-byte TCP ping-pong between two threads. With
// a ggml-rpc listener (the TCP daemon's, or --ggml_rpc_port of --target's
// host), llama.cpp's reused-graph round trip: GRAPH_RECOMPUTE of a 1-op
// graph + a 64-byte GET_TENSOR. Ends with the targets as ratios.
//
// Loopback round trips depend on where the two ends run (bench/
// cpu_pinning.h), and the scheduler places the ping-pong's threads and the
// daemon's differently from run to run. So with a daemon of its own, the
// ggml-rpc round trip and the ping-pong are measured again pinned, on one
// CPU and on two, the ping-pong's reader sleeping and polling, and each
// ggml-rpc ratio is taken against the faster ping-pong of its placement.
// Beside them, raw TCP exchanges the round trip's own messages (two
// requests, one reply) in the same placement: the protocol's floor.
//
//   bazel run -c opt //bench:rtt [-- --n=N --target=HOST:PORT
//                                    --unix_target=unix:PATH
//                                    --ggml_rpc_port=PORT]

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/cpu_pinning.h"
#include "bench/ggml_rpc_bench.h"
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
#include "tests/integration/daemon_process.h"

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

// The row of round trips timed in seconds.
Row FromSeconds(const std::string& name, std::vector<double> seconds) {
  for (double& s : seconds) s *= 1e6;
  return Row{name, Percentile(seconds, 0.5), Percentile(seconds, 0.99)};
}

// A row of raw TCP exchanges (Loopback::Exchange).
absl::StatusOr<Row> ExchangeRow(const std::string& name, Loopback& loopback,
                                const std::vector<size_t>& sends, size_t reply,
                                int n, Loopback::Reader reader) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> rtts,
                           loopback.Exchange(sends, reply, n, reader));
  return FromSeconds(name, std::move(rtts));
}

// A row of ggml-rpc GRAPH_RECOMPUTE + GET_TENSOR round trips, on a new
// connection (so its thread in the daemon starts where the daemon's
// threads are pinned now).
absl::StatusOr<Row> RecomputeRow(const std::string& name, int port, int n) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> rpc, GgmlRpcRecompute(port, n));
  return FromSeconds(name, std::move(rpc));
}

// Medians in microseconds with client and daemon pinned to CPUs: the
// ggml-rpc round trip, the faster TCP ping-pong (reader asleep or polling),
// and raw TCP exchanging the round trip's messages (reader polling, as the
// daemon's).
struct Placed {
  std::string name;  // "1 CPU": the same one; "2 CPUs": one each
  double ping = 0;
  double raw = 0;
  double recompute = 0;
};

// The graph x + c + c + ... (`ops` adds) with c on the daemon, and one
// execution's input and output.
struct Chain {
  Graph graph;
  Tensor* y = nullptr;
  std::vector<client::TensorInput> in;
  std::vector<client::TensorOutput> out;
};

absl::StatusOr<Chain> MakeChain(Context& ctx, Tensor* x, Tensor* c, int ops,
                                std::vector<float>& input,
                                std::vector<float>& result) {
  Chain chain;
  chain.y = x;
  for (int i = 0; i < ops; ++i) {
    TESSERA_ASSIGN_OR_RETURN(chain.y, Add(ctx, chain.y, c));
  }
  chain.y->flags |= kFlagOutput;
  TESSERA_RETURN_IF_ERROR(chain.graph.Expand(chain.y));
  chain.in = {{x, input.data(), 64}};
  chain.out = {{chain.y, result.data(), 64}};
  return chain;
}

// Executions per second of `graph` with `in_flight` sent ahead on one
// Execute stream, over `count` executions.
absl::StatusOr<double> Throughput(client::RemoteGraph& graph,
                                  const Chain& chain, int in_flight,
                                  int count) {
  const std::vector<const Tensor*> wanted = {chain.y};
  const auto start = std::chrono::steady_clock::now();
  int sent = 0;
  for (; sent < std::min(in_flight, count); ++sent) {
    TESSERA_RETURN_IF_ERROR(graph.Submit(chain.in, wanted));
  }
  for (int received = 0; received < count; ++received) {
    TESSERA_RETURN_IF_ERROR(graph.Receive(chain.out));
    if (sent < count) {
      TESSERA_RETURN_IF_ERROR(graph.Submit(chain.in, wanted));
      ++sent;
    }
  }
  return count / std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - start)
                     .count();
}

absl::Status Main(int n, const std::string& tcp_target,
                  const std::string& unix_target, int ggml_rpc_port) {
  // The daemons, each a process of its own unless given.
  const std::vector<std::string> flags = {"--devices=cpu", "--threads=1",
                                          "--log_level=warn"};
  std::unique_ptr<testing::DaemonProcess> tcp_daemon, unix_daemon;
  std::string tcp = tcp_target, unix = unix_target;
  if (tcp.empty()) {
    std::vector<std::string> tcp_flags = flags;
    tcp_flags.push_back("--ggml_rpc_listen=127.0.0.1:0");
    TESSERA_ASSIGN_OR_RETURN(tcp_daemon,
                             testing::DaemonProcess::Start(tcp_flags));
    tcp = tcp_daemon->address();
    ggml_rpc_port = tcp_daemon->ggml_rpc_port();
  }
  if (unix.empty() && tcp_target.empty()) {
    TESSERA_ASSIGN_OR_RETURN(
        unix_daemon,
        testing::DaemonProcess::Start(flags, absl::Seconds(120),
                                      testing::DaemonProcess::Listen::kUnix));
    unix = unix_daemon->address();
  }

  std::vector<Row> rows;
  Row execute_1;
  double one_at_a_time = 0, eight_in_flight = 0;
  for (const std::string& target : {tcp, unix}) {
    if (target.empty()) continue;
    const bool over_tcp = target == tcp;
    const std::string where = over_tcp ? "TCP" : "unix";
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> client,
                             client::Client::Connect(target));
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

    for (int ops : {1, 100}) {
      TESSERA_ASSIGN_OR_RETURN(Chain chain,
                               MakeChain(ctx, x, c, ops, input, result));
      auto check = [&]() -> absl::Status {
        if (result[0] != 0.5f + ops) {
          return absl::InternalError(absl::StrCat("wrong result ", result[0]));
        }
        return absl::OkStatus();
      };
      if (over_tcp) {
        TESSERA_ASSIGN_OR_RETURN(
            Row compute,
            Measure(absl::StrCat("Compute, ", ops, "-op graph, TCP"), n / 2,
                    [&]() -> absl::Status {
                      TESSERA_RETURN_IF_ERROR(
                          client->Compute(chain.graph, chain.in, chain.out));
                      return check();
                    }));
        rows.push_back(compute);
      }
      TESSERA_ASSIGN_OR_RETURN(
          std::unique_ptr<client::RemoteGraph> registered,
          client::RemoteGraph::Register(*client, chain.graph,
                                        {.n_copies = 1}));
      TESSERA_ASSIGN_OR_RETURN(
          Row execute,
          Measure(absl::StrCat("Execute, ", ops, "-op graph, ", where), n,
                  [&]() -> absl::Status {
                    TESSERA_RETURN_IF_ERROR(
                        registered->Run(chain.in, chain.out));
                    return check();
                  }));
      rows.push_back(execute);
      if (over_tcp && ops == 1) execute_1 = execute;
      if (over_tcp && ops == 100) {
        TESSERA_ASSIGN_OR_RETURN(one_at_a_time,
                                 Throughput(*registered, chain, 1, n));
        TESSERA_ASSIGN_OR_RETURN(eight_in_flight,
                                 Throughput(*registered, chain, 8, n));
        TESSERA_RETURN_IF_ERROR(check());
      }
    }
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<double> echoes, GrpcEcho(64, n));
  const Row echo =
      FromSeconds("gRPC stream echo, 64 B, TCP", std::move(echoes));
  rows.push_back(echo);
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Loopback> loopback,
                           Loopback::Open());
  // Where the scheduler puts them: the ping-pong's two threads share a
  // vCPU in some runs and not in others, and the daemon's connection thread
  // (which polls) mostly runs apart from the client.
  TESSERA_ASSIGN_OR_RETURN(
      const Row ping, ExchangeRow("TCP ping-pong, 64 B", *loopback, {64}, 64, n,
                                  Loopback::Reader::kSleeps));
  rows.push_back(ping);
  Row recompute;
  if (ggml_rpc_port != 0) {
    TESSERA_ASSIGN_OR_RETURN(
        recompute,
        RecomputeRow("ggml-rpc RECOMPUTE + GET 64 B", ggml_rpc_port, n));
    rows.push_back(recompute);
  }
  // The same with both ends pinned: on one CPU, and on two.
  std::vector<Placed> placed;
  const std::vector<int> cpus = AllowedCpus();
  const RecomputeBytes messages = GgmlRpcRecomputeBytes();
  if (ggml_rpc_port != 0 && tcp_daemon != nullptr && cpus.size() >= 2) {
    for (const auto& [name, daemon_cpu] :
         {std::pair{"1 CPU", cpus[0]}, std::pair{"2 CPUs", cpus[1]}}) {
      TESSERA_RETURN_IF_ERROR(PinCallingThread({cpus[0]}));
      TESSERA_RETURN_IF_ERROR(PinProcess(tcp_daemon->pid(), {daemon_cpu}));
      TESSERA_RETURN_IF_ERROR(loopback->PinServer({daemon_cpu}));
      Placed p{name};
      TESSERA_ASSIGN_OR_RETURN(
          const Row sleeps,
          ExchangeRow(absl::StrCat("TCP ping-pong ", name, ", sleeps"),
                      *loopback, {64}, 64, n, Loopback::Reader::kSleeps));
      TESSERA_ASSIGN_OR_RETURN(
          const Row polls,
          ExchangeRow(absl::StrCat("TCP ping-pong ", name, ", polls"),
                      *loopback, {64}, 64, n, Loopback::Reader::kPolls));
      p.ping = std::min(sleeps.median_us, polls.median_us);
      TESSERA_ASSIGN_OR_RETURN(
          const Row raw,
          ExchangeRow(absl::StrCat("TCP, its messages ", name), *loopback,
                      messages.requests, messages.reply, n,
                      Loopback::Reader::kPolls));
      p.raw = raw.median_us;
      TESSERA_ASSIGN_OR_RETURN(
          const Row pair,
          RecomputeRow(absl::StrCat("ggml-rpc RECOMPUTE+GET ", name),
                       ggml_rpc_port, n));
      p.recompute = pair.median_us;
      rows.insert(rows.end(), {sleeps, polls, raw, pair});
      placed.push_back(p);
    }
    TESSERA_RETURN_IF_ERROR(PinCallingThread(cpus));
    TESSERA_RETURN_IF_ERROR(PinProcess(tcp_daemon->pid(), cpus));
    TESSERA_RETURN_IF_ERROR(loopback->PinServer(cpus));
  }

  absl::PrintF("round trips of 64 bytes, %d samples (Compute: %d); daemons: "
               "%s%s%s\n\n",
               n, n / 2, tcp, unix.empty() ? "" : ", ", unix);
  absl::PrintF("%-32s %10s %10s %12s\n", "case", "median us", "p99 us",
               "median/echo");
  for (const Row& row : rows) {
    absl::PrintF("%-32s %10.1f %10.1f %12.2f\n", row.name, row.median_us,
                 row.p99_us, row.median_us / echo.median_us);
  }
  absl::PrintF("\n%-54s %8s %8s\n", "target (TCP)", "measured", "limit");
  absl::PrintF("%-54s %8.2f %8s\n",
               "Execute 1-op median / gRPC echo median", execute_1.median_us /
               echo.median_us, "<= 1.3");
  absl::PrintF("%-54s %8.2f %8s\n", "Execute 1-op p99 / its median",
               execute_1.p99_us / execute_1.median_us, "<= 3");
  absl::PrintF("%-54s %8.2f %8s\n",
               absl::StrFormat("100-op: 8 in flight %.0f/s / 1 at a time %.0f/s",
                               eight_in_flight, one_at_a_time),
               eight_in_flight / one_at_a_time, ">= 3");
  if (ggml_rpc_port != 0) {
    // Pinned, the ratio compares like with like; unpinned, the two round
    // trips may have run in different placements.
    absl::PrintF("%-54s %8.2f %8s\n",
                 "ggml-rpc RECOMPUTE+GET / TCP ping-pong, unpinned",
                 recompute.median_us / ping.median_us,
                 placed.empty() ? "<= 2" : "");
  }
  for (const Placed& p : placed) {
    absl::PrintF("%-54s %8.2f %8s\n",
                 absl::StrCat("ggml-rpc RECOMPUTE+GET / faster ping-pong, ",
                              p.name),
                 p.recompute / p.ping, "<= 2");
  }
  for (const Placed& p : placed) {
    absl::PrintF(
        "%-54s %8.2f %8s\n",
        absl::StrCat("ggml-rpc RECOMPUTE+GET / TCP, its messages, ", p.name),
        p.recompute / p.raw, "");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::server::TuneProcess();
  spdlog::set_level(spdlog::level::warn);
  int n = 2000;
  std::string target, unix_target;
  int ggml_rpc_port = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--n=", 0) == 0) {
      n = std::max(10, std::atoi(arg.c_str() + 4));
    } else if (arg.rfind("--target=", 0) == 0) {
      target = arg.substr(9);
    } else if (arg.rfind("--unix_target=", 0) == 0) {
      unix_target = arg.substr(14);
    } else if (arg.rfind("--ggml_rpc_port=", 0) == 0) {
      ggml_rpc_port = std::atoi(arg.c_str() + 16);
    } else {
      absl::FPrintF(stderr,
                    "usage: rtt [--n=N] [--target=HOST:PORT] "
                    "[--unix_target=unix:PATH] [--ggml_rpc_port=PORT]\n");
      return 2;
    }
  }
  if (absl::Status s = tessera::bench::Main(n, target, unix_target,
                                                 ggml_rpc_port);
      !s.ok()) {
    absl::FPrintF(stderr, "rtt: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
