// Soak: many clients doing random sessions against one tesserad process for
// a bounded time, then a check that the daemon came back to where it began.
//
// Each client thread repeats sessions: connect, a random mix of buffer
// allocations, uploads read back and compared, one-shot Computes and
// registered graphs executed over a stream (results checked), frees and
// requests that must fail; then a clean close, or a disconnect that leaves
// everything to the daemon. Some sessions run in a child process that is
// killed (SIGKILL) at a random moment. A probe client executes a small
// registered graph every 100 ms throughout, for latency by minute.
//
// Printed: the daemon's RSS, thread count and device memory in use at the
// start, at their peak and after the clients are gone; the probe's median
// and p99 per minute; session and error counts. Exits non-zero when a
// result is wrong or a call fails in a way the session did not provoke.
//
//   bazel run -c opt //bench:soak [-- --clients=8 --seconds=600]

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "bench/loopback.h"
#include "client/client.h"
#include "client/remote_graph.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "spdlog/spdlog.h"
#include "tests/integration/daemon_process.h"

extern char** environ;

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kElems = 1024;

// The daemon process as /proc and ListDevices see it.
struct Usage {
  double rss_mib = 0;
  int threads = 0;
  double device_used_mib = 0;
};

absl::StatusOr<Usage> Sample(pid_t pid, client::Client& probe) {
  Usage u;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    int64_t v = 0;
    if (line.rfind("VmRSS:", 0) == 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(
                             absl::StripSuffix(line.substr(6), "kB")),
                         &v)) {
      u.rss_mib = v / 1024.0;
    } else if (line.rfind("Threads:", 0) == 0 &&
               absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(8)),
                                &v)) {
      u.threads = static_cast<int>(v);
    }
  }
  TESSERA_ASSIGN_OR_RETURN(auto devices, probe.ListDevices());
  for (const auto& d : devices) {
    u.device_used_mib += (d.memory_total() - d.memory_free()) / 1048576.0;
  }
  return u;
}

// y = a + b over two inline inputs of kElems floats.
struct AddGraph {
  AddGraph() {
    a = ctx.NewTensor(Type::kF32, {kElems}).value();
    b = ctx.NewTensor(Type::kF32, {kElems}).value();
    y = Add(ctx, a, b).value();
    y->flags |= kFlagOutput;
    (void)graph.Expand(y);
  }
  Context ctx;
  Graph graph;
  Tensor* a;
  Tensor* b;
  Tensor* y;
};

struct Counts {
  std::atomic<int64_t> sessions{0}, killed{0}, ops{0}, refused{0};
  std::atomic<int64_t> failures{0};
  std::mutex mu;
  std::string first_failure;

  void Fail(const std::string& what) {
    failures++;
    std::lock_guard<std::mutex> lock(mu);
    if (first_failure.empty()) first_failure = what;
  }
};

// Statuses a session provokes on purpose or may meet under load: quota,
// memory, a handle it freed. Anything else is a failure.
bool Expected(const absl::Status& s) {
  return s.ok() || absl::IsResourceExhausted(s) || absl::IsNotFound(s);
}

absl::Status Check(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::DataLossError(what);
}

// One session of random work; returns the first unexpected error.
absl::Status OneSession(const std::string& target, std::mt19937_64& rng,
                        Counts& counts, bool close_cleanly) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c,
                           client::Client::Connect(target));
  TESSERA_ASSIGN_OR_RETURN(auto devices, c->ListDevices());
  std::vector<uint64_t> buffers;
  AddGraph add;
  std::vector<float> a(kElems), b(kElems), y(kElems);
  const int n_ops = 5 + static_cast<int>(rng() % 25);
  for (int op = 0; op < n_ops; ++op) {
    counts.ops++;
    const std::string& device = devices[rng() % devices.size()].name();
    for (int64_t i = 0; i < kElems; ++i) {
      a[i] = static_cast<float>(rng() % 1000);
      b[i] = static_cast<float>(rng() % 1000);
    }
    switch (rng() % 5) {
      case 0: {  // upload and read back
        const uint64_t size = 4096 << (rng() % 11);  // 4 KiB .. 4 MiB
        auto info = c->AllocBuffer(device, size, BufferUsage::kAny);
        if (!info.ok()) {
          if (!Expected(info.status())) return info.status();
          counts.refused++;
          break;
        }
        buffers.push_back(info->handle);
        std::string data(size, '\0');
        for (size_t i = 0; i < size; i += 64) data[i] = char(rng());
        v1::TensorRef ref;
        ref.set_buffer(info->handle);
        TESSERA_RETURN_IF_ERROR(c->WriteTensor(ref, data.data(), size));
        std::string back(size, '\1');
        TESSERA_RETURN_IF_ERROR(c->ReadTensor(ref, back.data(), size));
        TESSERA_RETURN_IF_ERROR(Check(back == data, "read back differs"));
        break;
      }
      case 1:  // free one
        if (!buffers.empty()) {
          const size_t i = rng() % buffers.size();
          TESSERA_RETURN_IF_ERROR(c->FreeBuffer(buffers[i]));
          buffers.erase(buffers.begin() + i);
        }
        break;
      case 2: {  // one-shot compute
        const std::vector<client::TensorInput> in = {
            {add.a, a.data(), kElems * 4}, {add.b, b.data(), kElems * 4}};
        const std::vector<client::TensorOutput> out = {
            {add.y, y.data(), kElems * 4}};
        const absl::Status s = c->Compute(add.graph, in, out);
        if (!s.ok()) {
          if (!Expected(s)) return s;
          counts.refused++;
          break;
        }
        for (int64_t i = 0; i < kElems; ++i) {
          TESSERA_RETURN_IF_ERROR(Check(y[i] == a[i] + b[i], "Compute sum"));
        }
        break;
      }
      case 3: {  // registered graph, a few executions in flight
        auto g = client::RemoteGraph::Register(
            *c, add.graph, {.n_copies = 1 + static_cast<int>(rng() % 2)});
        if (!g.ok()) {
          if (!Expected(g.status())) return g.status();
          counts.refused++;
          break;
        }
        const int runs = 1 + static_cast<int>(rng() % 8);
        for (int r = 0; r < runs; ++r) {
          TESSERA_RETURN_IF_ERROR((*g)->Submit(
              {{add.a, a.data(), kElems * 4}, {add.b, b.data(), kElems * 4}},
              {add.y}));
        }
        for (int r = 0; r < runs; ++r) {
          TESSERA_RETURN_IF_ERROR(
              (*g)->Receive({{add.y, y.data(), kElems * 4}}));
          for (int64_t i = 0; i < kElems; ++i) {
            TESSERA_RETURN_IF_ERROR(
                Check(y[i] == a[i] + b[i], "Execute sum"));
          }
        }
        break;
      }
      default: {  // a request that must be refused
        const absl::Status s = c->FreeBuffer(uint64_t{1} << 60 | rng());
        TESSERA_RETURN_IF_ERROR(
            Check(absl::IsNotFound(s), "freeing a handle never given"));
        counts.refused++;
        break;
      }
    }
  }
  if (close_cleanly) {
    for (uint64_t h : buffers) TESSERA_RETURN_IF_ERROR(c->FreeBuffer(h));
  }
  counts.sessions++;
  return absl::OkStatus();
}

// A child process of this binary running sessions until it is killed.
absl::StatusOr<pid_t> SpawnChild(const std::string& self,
                                 const std::string& target, uint64_t seed) {
  std::vector<std::string> args = {self, "--child=" + target,
                                   absl::StrCat("--seed=", seed)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(),
                  environ) != 0) {
    return absl::InternalError("cannot start a child client");
  }
  return pid;
}

void Worker(const std::string& self, const std::string& target,
            uint64_t seed, Clock::time_point end, Counts& counts) {
  std::mt19937_64 rng(seed);
  while (Clock::now() < end) {
    if (rng() % 5 == 0) {  // a client killed mid-session
      auto pid = SpawnChild(self, target, rng());
      if (!pid.ok()) {
        counts.Fail(pid.status().ToString());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 900));
      kill(*pid, SIGKILL);
      waitpid(*pid, nullptr, 0);
      counts.killed++;
      continue;
    }
    const absl::Status s = OneSession(target, rng, counts, rng() % 2 == 0);
    if (!s.ok()) counts.Fail(s.ToString());
  }
}

struct Probe {
  std::vector<std::vector<double>> us_by_minute;
};

absl::Status Main(int n_clients, int seconds, const std::string& self) {
  TESSERA_ASSIGN_OR_RETURN(
      auto daemon, testing::DaemonProcess::Start(
                       {"--devices=cpu:2", "--session_memory_quota=64M",
                        "--session_idle_timeout=30s", "--log_level=warn"}));
  TESSERA_ASSIGN_OR_RETURN(auto probe, client::Client::Connect(daemon->address()));
  AddGraph add;
  TESSERA_ASSIGN_OR_RETURN(auto probe_graph,
                           client::RemoteGraph::Register(*probe, add.graph, {}));
  std::vector<float> a(kElems, 1), b(kElems, 2), y(kElems);
  auto probe_once = [&]() -> absl::StatusOr<double> {
    const auto start = Clock::now();
    TESSERA_RETURN_IF_ERROR(probe_graph->Run(
        {{add.a, a.data(), kElems * 4}, {add.b, b.data(), kElems * 4}},
        {{add.y, y.data(), kElems * 4}}));
    TESSERA_RETURN_IF_ERROR(Check(y[0] == 3, "probe sum"));
    return std::chrono::duration<double, std::micro>(Clock::now() - start)
        .count();
  };
  for (int i = 0; i < 20; ++i) TESSERA_RETURN_IF_ERROR(probe_once().status());
  TESSERA_ASSIGN_OR_RETURN(const Usage start, Sample(daemon->pid(), *probe));

  Counts counts;
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::seconds(seconds);
  std::vector<std::thread> workers;
  for (int i = 0; i < n_clients; ++i) {
    workers.emplace_back(Worker, self, daemon->address(), 1000 + i, end,
                         std::ref(counts));
  }
  Probe by_minute;
  Usage peak = start;
  while (Clock::now() < end) {
    auto us = probe_once();
    if (!us.ok()) return us.status();
    const size_t minute = std::chrono::duration_cast<std::chrono::minutes>(
                              Clock::now() - t0)
                              .count();
    if (by_minute.us_by_minute.size() <= minute) {
      by_minute.us_by_minute.resize(minute + 1);
    }
    by_minute.us_by_minute[minute].push_back(*us);
    TESSERA_ASSIGN_OR_RETURN(const Usage now, Sample(daemon->pid(), *probe));
    peak.rss_mib = std::max(peak.rss_mib, now.rss_mib);
    peak.threads = std::max(peak.threads, now.threads);
    peak.device_used_mib = std::max(peak.device_used_mib, now.device_used_mib);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& w : workers) w.join();

  // The daemon frees a disconnected session's memory when it notices the
  // connection is gone; give it until its device memory is back.
  Usage after;
  const auto settle_end = Clock::now() + std::chrono::seconds(60);
  do {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    TESSERA_ASSIGN_OR_RETURN(after, Sample(daemon->pid(), *probe));
  } while (after.device_used_mib > start.device_used_mib &&
           Clock::now() < settle_end);

  absl::PrintF("soak: %d clients x %d s against tesserad --devices=cpu:2 "
               "(pid %d)\n",
               n_clients, seconds, daemon->pid());
  absl::PrintF("sessions %d, killed clients %d, operations %d, refused as "
               "asked %d, failures %d\n\n",
               counts.sessions.load(), counts.killed.load(),
               counts.ops.load(), counts.refused.load(),
               counts.failures.load());
  absl::PrintF("%-22s %10s %10s %10s %10s\n", "daemon", "start", "peak",
               "after", "after/start");
  absl::PrintF("%-22s %10.1f %10.1f %10.1f %10.2f\n", "RSS MiB", start.rss_mib,
               peak.rss_mib, after.rss_mib, after.rss_mib / start.rss_mib);
  absl::PrintF("%-22s %10d %10d %10d %10.2f\n", "threads", start.threads,
               peak.threads, after.threads,
               double(after.threads) / start.threads);
  absl::PrintF("%-22s %10.1f %10.1f %10.1f\n\n", "device memory used MiB",
               start.device_used_mib, peak.device_used_mib,
               after.device_used_mib);
  absl::PrintF("%-8s %8s %12s %12s %14s\n", "minute", "probes", "median us",
               "p99 us", "p99 / first");
  double first_p99 = 0;
  for (size_t m = 0; m < by_minute.us_by_minute.size(); ++m) {
    auto& us = by_minute.us_by_minute[m];
    if (us.empty()) continue;
    const double p99 = Percentile(us, 0.99);
    if (first_p99 == 0) first_p99 = p99;
    absl::PrintF("%-8d %8d %12.1f %12.1f %14.2f\n", m, us.size(),
                 Percentile(us, 0.5), p99, p99 / first_p99);
  }
  if (counts.failures > 0) {
    return absl::InternalError(
        absl::StrCat(counts.failures.load(), " failures; first: ",
                     counts.first_failure));
  }
  if (after.device_used_mib > start.device_used_mib) {
    return absl::InternalError("device memory did not return to its start");
  }
  return absl::OkStatus();
}

// The body of a child client: sessions until killed.
int ChildMain(const std::string& target, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Counts counts;
  while (true) {
    const absl::Status s = OneSession(target, rng, counts, false);
    if (!s.ok() && !Expected(s)) {
      spdlog::error("child client: {}", s.ToString());
      return 1;
    }
  }
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  int clients = 8;
  int seconds = 600;
  uint64_t seed = 1;
  std::string child;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--clients=")) {
      (void)absl::SimpleAtoi(arg, &clients);
    } else if (absl::ConsumePrefix(&arg, "--seconds=")) {
      (void)absl::SimpleAtoi(arg, &seconds);
    } else if (absl::ConsumePrefix(&arg, "--child=")) {
      child = std::string(arg);
    } else if (absl::ConsumePrefix(&arg, "--seed=")) {
      (void)absl::SimpleAtoi(arg, &seed);
    }
  }
  if (!child.empty()) return tessera::bench::ChildMain(child, seed);
  spdlog::set_level(spdlog::level::warn);
  const absl::Status s = tessera::bench::Main(
      clients, seconds, "/proc/self/exe");
  if (!s.ok()) {
    absl::FPrintF(stderr, "soak failed: %s\n", s.ToString());
    return 1;
  }
  return 0;
}
