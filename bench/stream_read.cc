#include "bench/stream_read.h"

#include <immintrin.h>

namespace tessera::bench {
namespace {

// Words per stream per step: four 32-byte vectors.
constexpr size_t kStep = 16;

__attribute__((target("avx2"))) uint64_t StreamSumAvx2(const uint64_t* p,
                                                       size_t quarter) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i < quarter; i += kStep) {
    for (int s = 0; s < 4; ++s) {
      const __m256i* v = reinterpret_cast<const __m256i*>(p + s * quarter + i);
      a = _mm256_add_epi64(a, _mm256_loadu_si256(v));
      b = _mm256_add_epi64(b, _mm256_loadu_si256(v + 1));
      c = _mm256_add_epi64(c, _mm256_loadu_si256(v + 2));
      d = _mm256_add_epi64(d, _mm256_loadu_si256(v + 3));
    }
  }
  const __m256i sum =
      _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

uint64_t StreamSumPortable(const uint64_t* p, size_t quarter) {
  uint64_t sum[4] = {};
  for (size_t i = 0; i < quarter; ++i) {
    for (int s = 0; s < 4; ++s) sum[s] += p[s * quarter + i];
  }
  return sum[0] + sum[1] + sum[2] + sum[3];
}

}  // namespace

uint64_t StreamSum(const uint64_t* p, size_t n) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const size_t quarter = n / 4 / kStep * kStep;
  uint64_t sum =
      avx2 ? StreamSumAvx2(p, quarter) : StreamSumPortable(p, quarter);
  for (size_t i = 4 * quarter; i < n; ++i) sum += p[i];
  return sum;
}

}  // namespace tessera::bench
