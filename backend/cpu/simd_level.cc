#include "backend/cpu/simd_level.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace tessera {

namespace {

#if defined(__x86_64__)
// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does
// not know the feature.
bool HasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

}  // namespace

SimdLevel DetectSimdLevel() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") &&
                    __builtin_cpu_supports("fma") && HasF16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512vnni");
  if (avx512) return SimdLevel::kAvx512;
  if (avx2) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kScalar;
}

std::vector<SimdLevel> SupportedSimdLevels() {
  std::vector<SimdLevel> levels;
  const int best = static_cast<int>(DetectSimdLevel());
  for (int level = 0; level <= best; ++level) {
    levels.push_back(static_cast<SimdLevel>(level));
  }
  return levels;
}

std::string_view SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

absl::StatusOr<SimdLevel> ParseSimdLevel(std::string_view name) {
  for (SimdLevel level :
       {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (name == SimdLevelName(level)) return level;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "[ParseSimdLevel] unknown SIMD level \"%s\" (want scalar, avx2 or "
      "avx512)",
      name));
}

}  // namespace tessera
