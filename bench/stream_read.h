#ifndef TESSERA_BENCH_STREAM_READ_H_
#define TESSERA_BENCH_STREAM_READ_H_

// The plain streaming read the benchmarks hold memory-bound work against.

#include <cstddef>
#include <cstdint>

namespace tessera::bench {

// The sum of the n words at p, read as four streams side by side: the
// four quarters of the words in step, 128 bytes of each per step, with
// AVX2 where the CPU has it, and no software prefetch. Of the plain reads
// measured on a 2-vCPU Zen 4 VM (two threads, each on its half of 256 MiB,
// alternating pass by pass in one process), this one was the fastest: in
// minutes when its memory ran fast, 60.5 GB/s against 58.3 reading one
// stream, 49.9 reading one stream of words prefetched 16 KiB ahead and
// 41.2 reading 32-byte vectors so prefetched; in slow minutes all of them
// read 30-37 GB/s, this one as fast as any.
uint64_t StreamSum(const uint64_t* p, size_t n);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_STREAM_READ_H_
