#include "bench/stream_read.h"

#include <immintrin.h>

namespace tessera::bench {
namespace {

// Words per stream per step: four 32-byte vectors.
constexpr size_t kStep = 16;

// The sum of kStreams runs of `length` words at p, p + length, ..., read
// in step.
template <int kStreams>
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint64_t* p,
                                                 size_t length) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i < length; i += kStep) {
    for (int s = 0; s < kStreams; ++s) {
      const __m256i* v = reinterpret_cast<const __m256i*>(p + s * length + i);
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

template <int kStreams>
uint64_t SumPortable(const uint64_t* p, size_t length) {
  uint64_t sum[4] = {};
  for (size_t i = 0; i < length; ++i) {
    for (int s = 0; s < kStreams; ++s) sum[s] += p[s * length + i];
  }
  return sum[0] + sum[1] + sum[2] + sum[3];
}

}  // namespace

uint64_t StreamSum(ReadKind kind, const uint64_t* p, size_t n) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const bool four = kind == ReadKind::kFourStreams;
  const size_t streams = four ? 4 : 1;
  const size_t length = n / streams / kStep * kStep;
  uint64_t sum;
  if (avx2) {
    sum = four ? SumAvx2<4>(p, length) : SumAvx2<1>(p, length);
  } else {
    sum = four ? SumPortable<4>(p, length) : SumPortable<1>(p, length);
  }
  for (size_t i = streams * length; i < n; ++i) sum += p[i];
  return sum;
}

}  // namespace tessera::bench
