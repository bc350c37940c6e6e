// The content hash of weight uploads (proto/content_hash.h) on data in
// memory, on 1 and on every hardware thread, beside memcpy of the same
// bytes in the same run.
//
//   bazel run -c opt //bench:hash [-- --mib=N]

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "proto/content_hash.h"

namespace {

template <typename F>
double BestSeconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 1024;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--mib=", 0) == 0) {
      mib = std::max(1, std::atoi(arg.c_str() + 6));
    } else {
      absl::FPrintF(stderr, "usage: hash [--mib=N]\n");
      return 2;
    }
  }
  const size_t bytes = mib << 20;
  std::vector<uint8_t> data(bytes), copy(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 31);
  std::memcpy(copy.data(), data.data(), bytes);  // touch both
  const double memcpy_s =
      BestSeconds(3, [&] { std::memcpy(copy.data(), data.data(), bytes); });
  const int cores =
      static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  absl::PrintF("content hash of %d MiB in memory, best of 3\n\n", mib);
  absl::PrintF("%-24s %8s %10s\n", "case", "GB/s", "x memcpy");
  absl::PrintF("%-24s %8.2f %10.2f\n", "memcpy", bytes / memcpy_s / 1e9, 1.0);
  for (int threads : {1, cores}) {
    tessera::wire::ContentHash sink;
    const double s = BestSeconds(3, [&] {
      sink = tessera::wire::HashContent(data.data(), bytes, threads);
    });
    absl::PrintF("%-24s %8.2f %10.2f\n",
                 absl::StrFormat("hash, %d thread%s", threads,
                                 threads == 1 ? "" : "s"),
                 bytes / s / 1e9, memcpy_s / s);
    if (sink.Hex().empty()) return 1;
    if (threads == cores) break;
  }
  return 0;
}
