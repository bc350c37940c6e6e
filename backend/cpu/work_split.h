#ifndef TESSERA_BACKEND_CPU_WORK_SPLIT_H_
#define TESSERA_BACKEND_CPU_WORK_SPLIT_H_

#include <algorithm>
#include <cstdint>

namespace tessera {

// Half-open range [begin, end) of units.
struct WorkRange {
  int64_t begin;
  int64_t end;
};

// Part `ith` of `nth` of `n` units: consecutive, as equal as possible.
inline WorkRange WorkPart(int64_t n, int ith, int nth) {
  const int64_t base = n / nth;
  const int64_t extra = n % nth;
  const int64_t begin = ith * base + std::min<int64_t>(ith, extra);
  return {begin, begin + base + (ith < extra ? 1 : 0)};
}

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_WORK_SPLIT_H_
