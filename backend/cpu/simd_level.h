#ifndef TESSERA_BACKEND_CPU_SIMD_LEVEL_H_
#define TESSERA_BACKEND_CPU_SIMD_LEVEL_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera {

// Instruction-set levels the CPU kernels are compiled for, lowest first.
// Each level's kernels live in a library compiled with that level's flags
// and run only when the CPU reports the features (checked at run time):
//  - kScalar: any x86-64 (and any other target): portable C++.
//  - kAvx2: AVX2, FMA, F16C.
//  - kAvx512: AVX-512 F, BW, VL and VNNI.
//  - kAvx512Bf16: kAvx512 and AVX512-BF16, whose dot products of BF16
//    pairs (vdpbf16ps) take BF16 weights' products with many columns.
//  - kAmx: kAvx512Bf16 with the tile units (AMX-TILE, -INT8, -BF16) for
//    large products, where the kernel lets this process use them
//    (DetectSimdLevel asks it, once per process).
enum class SimdLevel {
  kScalar = 0,
  kAvx2 = 1,
  kAvx512 = 2,
  kAvx512Bf16 = 3,
  kAmx = 4
};

// The highest level this CPU supports.
SimdLevel DetectSimdLevel();

// Every level this CPU supports, lowest first (kScalar always).
std::vector<SimdLevel> SupportedSimdLevels();

// "scalar", "avx2", "avx512", "avx512bf16", "amx".
std::string_view SimdLevelName(SimdLevel level);

// The inverse of SimdLevelName. Errors: INVALID_ARGUMENT for another name.
absl::StatusOr<SimdLevel> ParseSimdLevel(std::string_view name);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_SIMD_LEVEL_H_
