#include "backend/cuda/cuda_mul_mat.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/kernels.h"
#include "base/status_macros.h"
#include "graph/type.h"

namespace tessera {
namespace {

constexpr int64_t kIntLimit = int64_t{1} << 31;
constexpr size_t kScratchAlignment = 256;

size_t AlignUp(size_t n) {
  return (n + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

// How one MUL_MAT runs (see cuda_mul_mat.h).
struct Plan {
  bool matvec = false;
  Type compute_type = Type::kF32;
  cudaDataType_t cuda_type = CUDA_R_32F;
  size_t element_size = sizeof(float);
  bool convert_a = false;
  bool convert_b = false;
  size_t a_bytes = 0;  // scratch for the converted a (or MatVec's)
  size_t b_bytes = 0;  // scratch for the converted b
};

// Whether `t` can be a cuBLAS operand of element size `size` as it lies:
// contiguous rows, strides in whole elements, rows at least k apart.
bool UsableAsIs(const Tensor& t, size_t size) {
  return t.nb[0] == size && t.nb[1] % size == 0 && t.nb[2] % size == 0 &&
         t.nb[3] % size == 0 && t.nb[1] / size >= static_cast<size_t>(t.ne[0]) &&
         t.nb[1] / size < static_cast<size_t>(kIntLimit) &&
         reinterpret_cast<uintptr_t>(t.data) % size == 0;
}

Plan MakePlan(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  Plan plan;
  if (b.ne[1] == 1) {
    plan.matvec = true;
    plan.a_bytes =
        cuda_kernels::MatVecScratchBytes(ToKTensor(a), ToKTensor(b));
    return plan;
  }
  switch (a.type) {
    case Type::kF16:
    case Type::kQ8_0:
    case Type::kQ4_0:
    case Type::kQ4_1:
    case Type::kQ5_0:
    case Type::kQ5_1:
    case Type::kQ2_K:
    case Type::kQ3_K:
    case Type::kQ4_K:
    case Type::kQ5_K:
    case Type::kQ6_K:
      plan.compute_type = Type::kF16;
      plan.cuda_type = CUDA_R_16F;
      plan.element_size = 2;
      break;
    case Type::kBF16:
      plan.compute_type = Type::kBF16;
      plan.cuda_type = CUDA_R_16BF;
      plan.element_size = 2;
      break;
    case Type::kF32:
    case Type::kI32:
    case Type::kI64:
      break;
  }
  const int64_t k = a.ne[0];
  const int64_t r2 = b.ne[2] / a.ne[2];
  plan.convert_a =
      a.type != plan.compute_type || !UsableAsIs(a, plan.element_size);
  plan.convert_b = plan.compute_type != Type::kF32 ||
                   !UsableAsIs(b, sizeof(float)) ||
                   (r2 > 1 && b.nb[2] != static_cast<size_t>(b.ne[1]) * b.nb[1]);
  if (plan.convert_a) {
    plan.a_bytes = AlignUp(plan.element_size * static_cast<size_t>(k) *
                           a.ne[1] * a.ne[2] * a.ne[3]);
  }
  if (plan.convert_b) {
    plan.b_bytes = AlignUp(plan.element_size * static_cast<size_t>(k) *
                           b.ne[1] * b.ne[2] * b.ne[3]);
  }
  return plan;
}

// A contiguous tensor of `type` with `like`'s shape at `data`.
cuda_kernels::KTensor Contiguous(const Tensor& like, Type type, void* data) {
  cuda_kernels::KTensor t;
  t.data = static_cast<char*>(data);
  t.type = static_cast<int32_t>(type);
  int64_t stride = static_cast<int64_t>(Traits(type).type_size);
  for (int i = 0; i < kMaxDims; ++i) {
    t.ne[i] = like.ne[i];
    t.nb[i] = stride;
    stride *= like.ne[i];
  }
  return t;
}

std::string Where(const Tensor& node) {
  return absl::StrCat("[CUDA MUL_MAT] ", Describe(node), ": ");
}

absl::Status Prefixed(const Tensor& node, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(Where(node), s.message()));
}

// A GEMM operand: base address, element strides of dims 1..3.
struct Operand {
  const char* data;
  int64_t ld;
  int64_t stride2;
  int64_t stride3;
};

Operand OperandOf(const cuda_kernels::KTensor& t, size_t size) {
  return {t.data, t.nb[1] / static_cast<int64_t>(size),
          t.nb[2] / static_cast<int64_t>(size),
          t.nb[3] / static_cast<int64_t>(size)};
}

}  // namespace

bool MulMatSupported(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  if (a.ne[2] <= 0 || a.ne[3] <= 0) return true;  // rejected by the checks
  const int64_t columns = b.ne[1] * (b.ne[2] / a.ne[2]);
  return a.ne[0] < kIntLimit && a.ne[1] < kIntLimit && columns < kIntLimit;
}

size_t MulMatScratchBytes(const Tensor& node) {
  const Plan plan = MakePlan(node);
  return plan.a_bytes + plan.b_bytes;
}

absl::Status EnqueueMulMat(const CudaComputeContext& ctx, const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  if (node.IsEmpty()) return absl::OkStatus();
  const cuda_kernels::KTensor dst = ToKTensor(node);
  if (a.ne[0] == 0) {
    return Prefixed(node, TESSERA_CUDA_STATUS(cudaMemsetAsync(
                              node.data, 0, node.NumBytes(), ctx.stream)));
  }
  const Plan plan = MakePlan(node);
  if (plan.matvec) {
    return Prefixed(node,
                    CudaStatus(cuda_kernels::MatVec(
                                   dst, ToKTensor(a), ToKTensor(b),
                                   ctx.scratch, ctx.scratch_size, ctx.stream),
                               "MatVec kernel launch"));
  }

  cuda_kernels::KTensor ka = ToKTensor(a);
  cuda_kernels::KTensor kb = ToKTensor(b);
  char* scratch = static_cast<char*>(ctx.scratch);
  if (plan.convert_a) {
    const cuda_kernels::KTensor to = Contiguous(a, plan.compute_type, scratch);
    TESSERA_RETURN_IF_ERROR(Prefixed(
        node, CudaStatus(cuda_kernels::Copy(to, ka, ctx.stream),
                         "Copy kernel launch (a)")));
    ka = to;
  }
  if (plan.convert_b) {
    const cuda_kernels::KTensor to =
        Contiguous(b, plan.compute_type, scratch + plan.a_bytes);
    TESSERA_RETURN_IF_ERROR(Prefixed(
        node, CudaStatus(cuda_kernels::Copy(to, kb, ctx.stream),
                         "Copy kernel launch (b)")));
    kb = to;
  }

  const size_t size = plan.element_size;
  const Operand op_a = OperandOf(ka, size);
  const Operand op_b = OperandOf(kb, size);
  const int64_t m = a.ne[1];
  const int64_t n = b.ne[1];
  const int64_t k = a.ne[0];
  const int64_t r2 = b.ne[2] / a.ne[2];
  const int64_t r3 = b.ne[3] / a.ne[3];
  // With r2 > 1 the r2 b batches of one a batch are n * r2 columns.
  const int64_t columns = n * r2;
  const int64_t batches = a.ne[2];
  const int64_t dst_stride2 = m * n;
  const float alpha = 1.0f;
  const float beta = 0.0f;
  for (int64_t i3 = 0; i3 < b.ne[3]; ++i3) {
    const char* pa = op_a.data + (i3 / r3) * op_a.stride3 * size;
    const char* pb = op_b.data + i3 * op_b.stride3 * size;
    char* pc = dst.data + i3 * dst.nb[3];
    if (batches == 1) {
      // One product: cuBLAS's heuristics choose among more kernels for a
      // plain GEMM than for a batch of one.
      TESSERA_RETURN_IF_ERROR(Prefixed(
          node, TESSERA_CUBLAS_STATUS(cublasGemmEx(
                    ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                    static_cast<int>(columns), static_cast<int>(k), &alpha, pa,
                    plan.cuda_type, static_cast<int>(op_a.ld), pb,
                    plan.cuda_type, static_cast<int>(op_b.ld), &beta, pc,
                    CUDA_R_32F, static_cast<int>(m), CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT))));
      continue;
    }
    TESSERA_RETURN_IF_ERROR(Prefixed(
        node,
        TESSERA_CUBLAS_STATUS(cublasGemmStridedBatchedEx(
            ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
            static_cast<int>(columns), static_cast<int>(k), &alpha, pa,
            plan.cuda_type, static_cast<int>(op_a.ld), op_a.stride2, pb,
            plan.cuda_type, static_cast<int>(op_b.ld), op_b.stride2 * r2,
            &beta, pc, CUDA_R_32F, static_cast<int>(m), dst_stride2 * r2,
            static_cast<int>(batches), CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT))));
  }
  return absl::OkStatus();
}

}  // namespace tessera
