#ifndef TESSERA_BACKEND_CPU_KERNELS_LEVELS_H_
#define TESSERA_BACKEND_CPU_KERNELS_LEVELS_H_

// The kernel table of each SIMD level, each defined in its own library
// compiled with that level's flags (kernels_<level>.cc). Internal to the CPU
// backend: use KernelsFor() from kernels.h.

#include "backend/cpu/kernels.h"

namespace tessera {
namespace cpu_scalar {
extern const CpuKernels kKernels;
}  // namespace cpu_scalar
namespace cpu_avx2 {
extern const CpuKernels kKernels;
}  // namespace cpu_avx2
namespace cpu_avx512 {
extern const CpuKernels kKernels;
}  // namespace cpu_avx512
namespace cpu_avx512bf16 {
// cpu_avx512::kKernels with BF16 weights' products of many columns.
const CpuKernels& Kernels();
}  // namespace cpu_avx512bf16
namespace cpu_amx {
// cpu_avx512bf16::Kernels() with the tile products.
const CpuKernels& Kernels();
}  // namespace cpu_amx
}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_KERNELS_LEVELS_H_
