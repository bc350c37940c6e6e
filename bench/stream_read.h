#ifndef TESSERA_BENCH_STREAM_READ_H_
#define TESSERA_BENCH_STREAM_READ_H_

// The plain streaming reads the benchmarks hold memory-bound work against.
// Neither kind is the fastest everywhere, so a limit is the faster of the
// two measured in the same minute, alternating. On a 2-vCPU Zen 4 VM (two
// threads, each on its half of the buffer): in minutes when its memory ran
// fast, four streams read 256 MiB at 60.5 GB/s against 58.3 for one; one
// stream read a 32 MiB buffer (about the L3's size) at 155-169 GB/s against
// 98-102 for four. Software prefetch made neither faster where it counted
// (a prefetched single stream read 256 MiB at 41-50 GB/s in a fast minute,
// and no faster than the plain one in cache).

#include <cstddef>
#include <cstdint>

namespace tessera::bench {

enum class ReadKind {
  // The four quarters of the words in step, 128 bytes of each per step.
  kFourStreams,
  // The words in order, 128 bytes per step.
  kOneStream,
};
inline constexpr ReadKind kReadKinds[] = {ReadKind::kFourStreams,
                                          ReadKind::kOneStream};

// The sum of the n words at p, read as `kind`, with AVX2 where the CPU has
// it.
uint64_t StreamSum(ReadKind kind, const uint64_t* p, size_t n);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_STREAM_READ_H_
