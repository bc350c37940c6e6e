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

// Calls fn(i1, i2, i3) in order for the rows r in `rows` of a tensor of
// ne1 x ne2 x ... rows (r = i1 + ne1 * (i2 + ne2 * i3)). The indices are
// divided out once and then counted: perf put about a tenth of ROPE
// [128,32,512]'s time in three divisions a row.
template <typename Fn>
void ForEachRowIn(WorkRange rows, int64_t ne1, int64_t ne2, Fn fn) {
  if (rows.begin >= rows.end) return;
  int64_t i1 = rows.begin % ne1;
  int64_t i2 = (rows.begin / ne1) % ne2;
  int64_t i3 = rows.begin / (ne1 * ne2);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    fn(i1, i2, i3);
    if (++i1 < ne1) continue;
    i1 = 0;
    if (++i2 < ne2) continue;
    i2 = 0;
    ++i3;
  }
}

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_WORK_SPLIT_H_
