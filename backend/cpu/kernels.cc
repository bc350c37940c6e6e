#include "backend/cpu/kernels.h"

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels_levels.h"
#include "graph/type.h"

namespace tessera {

const CpuKernels& KernelsFor(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAmx:
      return cpu_amx::Kernels();
    case SimdLevel::kAvx512Bf16:
      return cpu_avx512bf16::Kernels();
    case SimdLevel::kAvx512:
      return cpu_avx512::kKernels;
    case SimdLevel::kAvx2:
      return cpu_avx2::kKernels;
    case SimdLevel::kScalar:
      break;
  }
  return cpu_scalar::kKernels;
}

void RowToF32(const CpuKernels& kernels, Type type, const void* row, float* dst,
              int64_t n) {
  switch (type) {
    case Type::kF32:
      std::memcpy(dst, row, static_cast<size_t>(n) * sizeof(float));
      return;
    case Type::kF16:
      return kernels.f16_to_f32(static_cast<const uint16_t*>(row), dst, n);
    case Type::kBF16:
      return kernels.bf16_to_f32(static_cast<const uint16_t*>(row), dst, n);
    case Type::kQ8_0:
      return kernels.q8_0_to_f32(row, dst, n);
    case Type::kQ4_0:
      return kernels.q4_0_to_f32(row, dst, n);
    case Type::kQ4_1:
      return kernels.q4_1_to_f32(row, dst, n);
    case Type::kQ5_0:
      return kernels.q5_0_to_f32(row, dst, n);
    case Type::kQ5_1:
      return kernels.q5_1_to_f32(row, dst, n);
    default:
      return RowToFloat(type, row, dst, n);
  }
}

}  // namespace tessera
