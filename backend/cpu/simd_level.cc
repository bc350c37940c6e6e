#include "backend/cpu/simd_level.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
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

// AVX512-BF16 (CPUID leaf 7 sub-leaf 1, EAX bit 5).
bool HasAvx512Bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a & (1u << 5)) != 0;
}

// AMX-TILE, AMX-INT8 and AMX-BF16 (CPUID leaf 7, EDX bits 24, 25, 22),
// with Linux's permission for this process to use the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18), asked once.
// A kernel that refuses it, or an older kernel that does not know the
// request, means no tiles.
bool TileUnitsUsable() {
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24,
                       kAmxInt8 = 1u << 25;
    if ((d & (kAmxBf16 | kAmxTile | kAmxInt8)) !=
        (kAmxBf16 | kAmxTile | kAmxInt8)) {
      return false;
    }
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
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
  const bool bf16 = avx512 && HasAvx512Bf16();
  if (bf16 && TileUnitsUsable()) return SimdLevel::kAmx;
  if (bf16) return SimdLevel::kAvx512Bf16;
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
    case SimdLevel::kAvx512Bf16:
      return "avx512bf16";
    case SimdLevel::kAmx:
      return "amx";
  }
  return "unknown";
}

absl::StatusOr<SimdLevel> ParseSimdLevel(std::string_view name) {
  for (SimdLevel level :
       {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512,
        SimdLevel::kAvx512Bf16, SimdLevel::kAmx}) {
    if (name == SimdLevelName(level)) return level;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "[ParseSimdLevel] unknown SIMD level \"%s\" (want scalar, avx2, "
      "avx512, avx512bf16 or amx)",
      name));
}

}  // namespace tessera
