// All-reduce of F32 through the HostCommunicator over 2 CPU devices (one
// thread each), against memcpy of the same bytes measured in the same run.
//
//   bazel run -c opt //bench:allreduce
//
// Bandwidths follow nccl-tests: for S bytes per rank and n ranks, algbw =
// S / time and busbw = algbw * 2(n-1)/n (the bytes each rank would move in
// a ring). memcpy GB/s is S / time of one memcpy of S bytes between two
// buffers already touched; the last column is busbw / memcpy. Times are
// medians of repeated calls, all-reduce and memcpy alternating so that
// both see the same machine load; an all-reduce call is AllReduce then
// Synchronize of every member stream.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/comm/host_communicator.h"
#include "backend/cpu/cpu_registry.h"
#include "backend/registry.h"
#include "base/status_macros.h"
#include "graph/context.h"
#include "graph/type.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kRanks = 2;
constexpr size_t kMinBytes = size_t{1} << 10;
constexpr size_t kMaxBytes = size_t{256} << 20;

double Median(std::vector<double> times) {
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  return times[times.size() / 2];
}

// Median seconds per call of `a` and of `b`, called alternately `repeats`
// times each after one warm-up call, so that both see the same load.
template <typename A, typename B>
std::pair<double, double> MedianSeconds(int repeats, A a, B b) {
  a();
  b();
  std::vector<double> times_a, times_b;
  for (int i = 0; i < repeats; ++i) {
    auto start = Clock::now();
    a();
    times_a.push_back(
        std::chrono::duration<double>(Clock::now() - start).count());
    start = Clock::now();
    b();
    times_b.push_back(
        std::chrono::duration<double>(Clock::now() - start).count());
  }
  return {Median(std::move(times_a)), Median(std::move(times_b))};
}

// Repeats for `bytes`: many for small sizes, 5 at 256 MiB.
int RepeatsFor(size_t bytes) {
  return static_cast<int>(
      std::clamp<size_t>((size_t{1} << 30) / bytes, 5, 400));
}

std::string Size(size_t bytes) {
  if (bytes >= (size_t{1} << 20)) return absl::StrFormat("%d MiB", bytes >> 20);
  return absl::StrFormat("%d KiB", bytes >> 10);
}

absl::Status Run() {
  Registry registry;
  TESSERA_RETURN_IF_ERROR(AddCpuDevices(kRanks, /*n_threads=*/1, registry));
  std::vector<Device*> devices(registry.devices().begin(),
                               registry.devices().end());
  std::vector<std::unique_ptr<Stream>> owned;
  std::vector<Stream*> streams;
  for (Device* device : devices) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream,
                             device->CreateStream());
    streams.push_back(stream.get());
    owned.push_back(std::move(stream));
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<HostCommunicator> comm,
                           HostCommunicator::Create(devices));

  absl::PrintF(
      "all-reduce F32 over %d CPU devices (1 thread each), %d "
      "hardware threads\n",
      kRanks, static_cast<int>(std::thread::hardware_concurrency()));
  absl::PrintF("%9s %7s %12s %10s %10s %11s %13s\n", "size", "repeats",
               "us/call", "algbw GB/s", "busbw GB/s", "memcpy GB/s",
               "busbw/memcpy");
  for (size_t bytes = kMinBytes; bytes <= kMaxBytes; bytes *= 4) {
    const int64_t count = static_cast<int64_t>(bytes / sizeof(float));
    Context ctx;
    std::vector<Tensor*> tensors;
    std::vector<std::unique_ptr<Buffer>> buffers;
    for (Device* device : devices) {
      TESSERA_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(Type::kF32, {count}));
      TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                               AllocTensors(device->buffer_type(), {t}));
      // Zeros stay zeros however often they are summed.
      TESSERA_RETURN_IF_ERROR(buffer->Clear(0));
      tensors.push_back(t);
      buffers.push_back(std::move(buffer));
    }
    std::vector<char> src(bytes, 1), dst(bytes, 2);
    const int repeats = RepeatsFor(bytes);
    absl::Status status;
    const auto [reduce, copy] = MedianSeconds(
        repeats,
        [&] {
          status.Update(comm->AllReduce(streams, tensors));
          for (Stream* s : streams) status.Update(s->Synchronize());
        },
        [&] { std::memcpy(dst.data(), src.data(), bytes); });
    TESSERA_RETURN_IF_ERROR(status);

    const double algbw = bytes / reduce / 1e9;
    const double busbw = algbw * 2.0 * (kRanks - 1) / kRanks;
    const double memcpy_bw = bytes / copy / 1e9;
    absl::PrintF("%9s %7d %12.1f %10.2f %10.2f %11.2f %13.2f\n", Size(bytes),
                 repeats, reduce * 1e6, algbw, busbw, memcpy_bw,
                 busbw / memcpy_bw);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main() {
  const absl::Status status = tessera::Run();
  if (!status.ok()) {
    absl::FPrintF(stderr, "allreduce: %s\n", status.ToString());
    return 1;
  }
  return 0;
}
