#include "backend/cuda/cuda_compute.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_mul_mat.h"
#include "graph/graph.h"
#include "graph/node_checks.h"
#include "graph/op_types.h"
#include "graph/type.h"

namespace tessera {
namespace {

using cuda_kernels::KTensor;

static_assert(static_cast<int32_t>(Type::kF32) == cuda_kernels::kF32);
static_assert(static_cast<int32_t>(Type::kF16) == cuda_kernels::kF16);
static_assert(static_cast<int32_t>(Type::kBF16) == cuda_kernels::kBF16);
static_assert(static_cast<int32_t>(Type::kI32) == cuda_kernels::kI32);
static_assert(static_cast<int32_t>(Type::kQ8_0) == cuda_kernels::kQ8_0);
static_assert(static_cast<int32_t>(Type::kQ4_0) == cuda_kernels::kQ4_0);
static_assert(static_cast<int32_t>(Type::kQ4_K) == cuda_kernels::kQ4_K);
static_assert(static_cast<int32_t>(Type::kQ5_K) == cuda_kernels::kQ5_K);
static_assert(static_cast<int32_t>(Type::kQ6_K) == cuda_kernels::kQ6_K);
static_assert(static_cast<int32_t>(Type::kI64) == cuda_kernels::kI64);
static_assert(static_cast<int32_t>(Type::kQ4_1) == cuda_kernels::kQ4_1);
static_assert(static_cast<int32_t>(Type::kQ5_0) == cuda_kernels::kQ5_0);
static_assert(static_cast<int32_t>(Type::kQ5_1) == cuda_kernels::kQ5_1);
static_assert(static_cast<int32_t>(Type::kQ2_K) == cuda_kernels::kQ2_K);
static_assert(static_cast<int32_t>(Type::kQ3_K) == cuda_kernels::kQ3_K);

// Kernels index dimensions and rows with 32-bit integers.
constexpr int64_t kIndexLimit = int64_t{1} << 31;

bool Valid(const Tensor* t) {
  return t != nullptr && IsValidType(static_cast<int32_t>(t->type));
}

// The kernels read K-quants (Q2_K to Q6_K) but have no quantizer for them:
// no node but a view writes one.
bool WritesReadOnlyType(const Tensor& node) {
  return !IsViewOp(node.op) && IsKQuant(node.type);
}

// Every dimension and the row count below 2^31.
bool FitsIndices(const Tensor& t) {
  int64_t rows = 1;
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] < 0 || t.ne[i] >= kIndexLimit) return false;
    if (i > 0) {
      rows *= t.ne[i];
      if (rows >= kIndexLimit) return t.IsEmpty();
    }
  }
  return true;
}

// Limits of the CUDA kernels beyond the op's types (graph/op_types.h).
bool WithinKernelLimits(const Tensor& node) {
  const Tensor* a = node.src[0];
  switch (node.op) {
    case Op::kArgsort:
      return a->ne[0] <= cuda_kernels::kMaxArgsortCols;
    case Op::kMulMat:
      return node.IsContiguous();
    case Op::kFlashAttnExt:
      return a->ne[0] <= cuda_kernels::kMaxFlashAttnHead &&
             node.src[2]->ne[0] <= cuda_kernels::kMaxFlashAttnHead;
    default:
      return true;
  }
}

// "[CUDA ADD] add f32 [4, 3, 1, 1]: ", the prefix of error messages.
std::string Where(const Tensor& node) {
  return absl::StrCat("[CUDA ", std::string(OpName(node.op)), "] ",
                      Describe(node), ": ");
}

template <typename... Args>
absl::Status Invalid(const Tensor& node, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(Where(node), args...));
}

// The CUDA device's limit on every operand beyond graph/node_checks.h (the
// 32-bit index limits are CudaSupportsNode's): kernels load whole elements
// (F32, I32: 4 bytes; F16, BF16 and the blocks' fp16 scales: 2 bytes), and
// a misaligned load would be a sticky device error.
absl::Status CheckAligned(const Tensor& node, const Tensor& t,
                          const char* role) {
  const size_t align = Traits(t.type).type_size % 4 == 0 ? 4 : 2;
  bool aligned = reinterpret_cast<uintptr_t>(t.data) % align == 0;
  for (int i = 0; i < kMaxDims; ++i) {
    aligned = aligned && (t.ne[i] <= 1 || t.nb[i] % align == 0);
  }
  if (!aligned && !t.IsEmpty()) {
    return Invalid(node, role, " ", Describe(t),
                   " has data or strides not aligned to ", align, " bytes");
  }
  return absl::OkStatus();
}

// YaRN correction dimension, as graph/reference_attention.cc computes it.
float YarnCorrDim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  constexpr float kPi = 3.14159265358979323846f;
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * kPi)) /
         (2.0f * std::log(base));
}

cuda_kernels::RopeArgs MakeRopeArgs(const Tensor& node) {
  cuda_kernels::RopeArgs args;
  args.n_dims = node.op_params[1];
  args.neox = node.op_params[2] == kRopeNeox;
  const int n_ctx_orig = node.op_params[4];
  args.freq_base = node.param<float>(5);
  args.freq_scale = node.param<float>(6);
  args.ext_factor = node.param<float>(7);
  args.attn_factor = node.param<float>(8);
  const float beta_fast = node.param<float>(9);
  const float beta_slow = node.param<float>(10);
  args.corr_low =
      std::max(0.0f, std::floor(YarnCorrDim(args.n_dims, n_ctx_orig, beta_fast,
                                            args.freq_base)));
  args.corr_high = std::min(static_cast<float>(args.n_dims - 1),
                            std::ceil(YarnCorrDim(args.n_dims, n_ctx_orig,
                                                  beta_slow, args.freq_base)));
  if (const Tensor* factors = node.src[2]; factors != nullptr) {
    args.freq_factors = static_cast<const char*>(factors->data);
    args.freq_factors_nb0 = static_cast<int64_t>(factors->nb[0]);
  }
  return args;
}

cuda_kernels::MapOp MapOpOf(const Tensor& node) {
  switch (node.op) {
    case Op::kScale:
      return cuda_kernels::MapOp::kScale;
    case Op::kSqr:
      return cuda_kernels::MapOp::kSqr;
    case Op::kSqrt:
      return cuda_kernels::MapOp::kSqrt;
    case Op::kLog:
      return cuda_kernels::MapOp::kLog;
    default:
      break;
  }
  switch (static_cast<UnaryOp>(node.op_params[0])) {
    case UnaryOp::kNeg:
      return cuda_kernels::MapOp::kNeg;
    case UnaryOp::kRelu:
      return cuda_kernels::MapOp::kRelu;
    case UnaryOp::kGelu:
      return cuda_kernels::MapOp::kGelu;
    case UnaryOp::kSilu:
      return cuda_kernels::MapOp::kSilu;
    case UnaryOp::kSigmoid:
      return cuda_kernels::MapOp::kSigmoid;
    case UnaryOp::kTanh:
      return cuda_kernels::MapOp::kTanh;
    case UnaryOp::kExp:
      return cuda_kernels::MapOp::kExp;
  }
  return cuda_kernels::MapOp::kNeg;  // unreachable: checked by support
}

cuda_kernels::BinaryOp BinaryOpOf(Op op) {
  switch (op) {
    case Op::kAdd:
      return cuda_kernels::BinaryOp::kAdd;
    case Op::kSub:
      return cuda_kernels::BinaryOp::kSub;
    case Op::kMul:
      return cuda_kernels::BinaryOp::kMul;
    default:
      return cuda_kernels::BinaryOp::kDiv;
  }
}

// The launch status of a kernel family for `node`.
absl::Status Launched(const Tensor& node, cudaError_t error) {
  if (error == cudaSuccess) return absl::OkStatus();
  const absl::Status s = CudaStatus(error, "kernel launch");
  return absl::Status(s.code(), absl::StrCat(Where(node), s.message()));
}

}  // namespace

cuda_kernels::KTensor ToKTensor(const Tensor& t) {
  KTensor k;
  k.data = static_cast<char*>(t.data);
  k.type = static_cast<int32_t>(t.type);
  for (int i = 0; i < kMaxDims; ++i) {
    k.ne[i] = t.ne[i];
    k.nb[i] = static_cast<int64_t>(t.nb[i]);
  }
  return k;
}

bool CudaSupportsNode(const Tensor& node) {
  if (!OpHasTypes(node) || !WithinKernelLimits(node)) return false;
  if (!FitsIndices(node) || WritesReadOnlyType(node)) return false;
  for (const Tensor* src : node.src) {
    if (src != nullptr && (!Valid(src) || !FitsIndices(*src))) return false;
  }
  return node.op != Op::kMulMat || MulMatSupported(node);
}

absl::Status CudaCheckNode(const Tensor& node) {
  if (!CudaSupportsNode(node)) {
    return Invalid(node, "the CUDA device does not support this node");
  }
  return CheckNode(node, Where(node),
                   [&node](const Tensor& t, const char* role) {
                     return CheckAligned(node, t, role);
                   });
}

size_t CudaScratchBytes(const Tensor& node) {
  switch (node.op) {
    case Op::kMulMat:
      return MulMatScratchBytes(node);
    case Op::kFlashAttnExt:
      return cuda_kernels::FlashAttnScratchBytes(ToKTensor(node),
                                                 ToKTensor(*node.src[1]));
    default:
      return 0;
  }
}

absl::Status CudaEnqueueNode(const CudaComputeContext& ctx,
                             const Tensor& node) {
  namespace k = cuda_kernels;
  const KTensor dst = ToKTensor(node);
  const Tensor* s0 = node.src[0];
  const Tensor* s1 = node.src[1];
  cudaStream_t stream = ctx.stream;
  if (IsViewOp(node.op)) return absl::OkStatus();  // no work
  switch (node.op) {
    case Op::kDup:
    case Op::kCpy:
    case Op::kCont:
      return Launched(node, k::Copy(dst, ToKTensor(*s0), stream));
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      return Launched(node, k::Binary(BinaryOpOf(node.op), dst, ToKTensor(*s0),
                                      ToKTensor(*s1), stream));
    case Op::kScale:
    case Op::kSqr:
    case Op::kSqrt:
    case Op::kLog:
    case Op::kUnary: {
      const bool scale = node.op == Op::kScale;
      return Launched(
          node, k::Map(MapOpOf(node), scale ? node.param<float>(0) : 1.0f,
                       scale ? node.param<float>(1) : 0.0f, dst, ToKTensor(*s0),
                       stream));
    }
    case Op::kGlu: {
      const KTensor b = s1 != nullptr ? ToKTensor(*s1) : KTensor{};
      return Launched(
          node, k::Glu(static_cast<GluOp>(node.op_params[0]) == GluOp::kGeGlu,
                       node.op_params[1] != 0, dst, ToKTensor(*s0),
                       s1 != nullptr ? &b : nullptr, stream));
    }
    case Op::kSumRows:
    case Op::kMean:
      return Launched(
          node, k::SumRows(node.op == Op::kMean, dst, ToKTensor(*s0), stream));
    case Op::kNorm:
    case Op::kRmsNorm:
      return Launched(
          node, k::Norm(node.op == Op::kRmsNorm, node.param<float>(0), dst,
                        ToKTensor(*s0), stream));
    case Op::kArgmax:
      return Launched(node, k::Argmax(dst, ToKTensor(*s0), stream));
    case Op::kArgsort:
      return Launched(
          node, k::Argsort(node.op_params[0] ==
                               static_cast<int32_t>(SortOrder::kDescending),
                           dst, ToKTensor(*s0), stream));
    case Op::kMulMat:
      return EnqueueMulMat(ctx, node);
    case Op::kGetRows:
      return Launched(
          node, k::GetRows(dst, ToKTensor(*s0), ToKTensor(*s1),
                           static_cast<int32_t>(node.op), ctx.error, stream));
    case Op::kSetRows:
      return Launched(
          node, k::SetRows(dst, ToKTensor(*s0), ToKTensor(*s1),
                           static_cast<int32_t>(node.op), ctx.error, stream));
    case Op::kSoftMax: {
      const KTensor mask = s1 != nullptr ? ToKTensor(*s1) : KTensor{};
      return Launched(
          node, k::SoftMax(dst, ToKTensor(*s0), s1 != nullptr ? &mask : nullptr,
                           node.param<float>(0), node.param<float>(1), stream));
    }
    case Op::kRope:
      return Launched(node, k::Rope(dst, ToKTensor(*s0), ToKTensor(*s1),
                                    MakeRopeArgs(node), stream));
    case Op::kConcat:
      return Launched(node, k::Concat(dst, ToKTensor(*s0), ToKTensor(*s1),
                                      node.op_params[0], stream));
    case Op::kFlashAttnExt: {
      const Tensor* m = node.src[3];
      const KTensor mask = m != nullptr ? ToKTensor(*m) : KTensor{};
      return Launched(
          node,
          k::FlashAttn(dst, ToKTensor(*s0), ToKTensor(*s1),
                       ToKTensor(*node.src[2]), m != nullptr ? &mask : nullptr,
                       node.param<float>(0), node.param<float>(1),
                       node.param<float>(2), ctx.scratch, ctx.scratch_size,
                       stream));
    }
    default:  // CudaCheckNode has passed only the ops above.
      break;
  }
  return Invalid(node, "unknown op");
}

}  // namespace tessera
