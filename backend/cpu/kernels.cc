#include "backend/cpu/kernels.h"

#include "backend/cpu/kernels_levels.h"

namespace tessera {

const CpuKernels& KernelsFor(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return cpu_avx512::kKernels;
    case SimdLevel::kAvx2:
      return cpu_avx2::kKernels;
    case SimdLevel::kScalar:
      break;
  }
  return cpu_scalar::kKernels;
}

}  // namespace tessera
