#ifndef TESSERA_BENCH_L2_FLUSH_H_
#define TESSERA_BENCH_L2_FLUSH_H_

// Empties a GPU's L2 cache of a benchmark's data between timed runs, so
// that each run reads its operands from DRAM. Plain C++ so that nvcc and
// the host compiler both read it.

#include <cuda_runtime.h>

#include <cstddef>

namespace tessera::bench {

// Queues a kernel on `stream` that reads `bytes` (a multiple of 16) of
// zeroed device memory at `buffer` and writes nothing (its first word
// only if the memory was not zeroed), so the L2 cache is
// left holding clean lines of `buffer` (no write-back charged to the next
// kernel, as a memset's dirty lines would be). `buffer` must be zeroed and
// at least four times the L2 size for the flush to be complete. Returns
// the launch error.
cudaError_t FlushL2(void* buffer, size_t bytes, cudaStream_t stream);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_L2_FLUSH_H_
