#include "backend/cuda/cuda_compute.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_mul_mat.h"
#include "graph/op_types.h"
#include "base/status_macros.h"
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

// Kernels index dimensions and rows with 32-bit integers.
constexpr int64_t kIndexLimit = int64_t{1} << 31;

bool Valid(const Tensor* t) {
  return t != nullptr && IsValidType(static_cast<int32_t>(t->type));
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

std::string Where(const Tensor& node) {
  return absl::StrCat("[CUDA ", std::string(OpName(node.op)), "] ");
}

template <typename... Args>
absl::Status Invalid(const Tensor& node, const Args&... args) {
  return absl::InvalidArgumentError(
      absl::StrCat(Where(node), Describe(node), ": ", args...));
}

// Operand checks of the reference kernels (graph/reference_internal.h).
absl::Status CheckOperand(const Tensor& node, const Tensor* t,
                          const char* role) {
  if (t == nullptr) return Invalid(node, "missing operand ", role);
  if (!IsValidType(static_cast<int32_t>(t->type))) {
    return Invalid(node, role, " has invalid type ",
                   static_cast<int32_t>(t->type));
  }
  if (!FitsIndices(*t)) {
    return Invalid(node, role, " ", Describe(*t),
                   " has a negative dimension or 2^31 or more rows");
  }
  const TypeTraits& traits = Traits(t->type);
  if (t->ne[0] % traits.block_size != 0) {
    return Invalid(node, role, " ", Describe(*t),
                   " has ne[0] not a multiple of the block size ",
                   traits.block_size);
  }
  if (traits.is_quantized && t->nb[0] != traits.type_size) {
    return Invalid(node, role, " ", Describe(*t),
                   " has non-contiguous quantized blocks");
  }
  if (t->data == nullptr && !t->IsEmpty()) {
    return Invalid(node, role, " ", Describe(*t), " has no data");
  }
  // Kernels load whole elements (F32, I32: 4 bytes; F16, BF16 and the
  // blocks' fp16 scales: 2 bytes); a misaligned load would be a sticky
  // device error.
  const size_t align = traits.type_size % 4 == 0 ? 4 : 2;
  bool aligned = reinterpret_cast<uintptr_t>(t->data) % align == 0;
  for (int i = 0; i < kMaxDims; ++i) {
    aligned = aligned && (t->ne[i] <= 1 || t->nb[i] % align == 0);
  }
  if (!aligned && !t->IsEmpty()) {
    return Invalid(node, role, " ", Describe(*t),
                   " has data or strides not aligned to ", align, " bytes");
  }
  return absl::OkStatus();
}

absl::Status CheckShape(const Tensor& node, const Tensor& t, const char* role,
                        const int64_t (&ne)[kMaxDims]) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] != ne[i]) {
      return Invalid(node, role, " ", Describe(t), " must have shape [", ne[0],
                     ", ", ne[1], ", ", ne[2], ", ", ne[3], "]");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSameShape(const Tensor& node, const Tensor& t,
                            const char* role, const Tensor& like) {
  const int64_t ne[kMaxDims] = {like.ne[0], like.ne[1], like.ne[2],
                                like.ne[3]};
  return CheckShape(node, t, role, ne);
}

// Every dimension of `b` positive and dividing `a`'s.
absl::Status CheckBroadcast(const Tensor& node, const Tensor& b,
                            const char* b_role, const Tensor& a) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (b.ne[i] <= 0 || a.ne[i] % b.ne[i] != 0) {
      return Invalid(node, b_role, " ", Describe(b), " does not broadcast to ",
                     Describe(a));
    }
  }
  return absl::OkStatus();
}

// An attention mask [n0, >= n1, m2, m3] with n2 % m2 == 0, n3 % m3 == 0.
absl::Status CheckMask(const Tensor& node, const Tensor& mask, int64_t n0,
                       int64_t n1, int64_t n2, int64_t n3) {
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, &mask, "mask"));
  if (mask.ne[0] != n0 || mask.ne[1] < n1 || mask.ne[2] <= 0 ||
      mask.ne[3] <= 0 || n2 % mask.ne[2] != 0 || n3 % mask.ne[3] != 0) {
    return Invalid(node, "mask ", Describe(mask), " does not fit [", n0,
                   ", >= ", n1, ", ", n2, ", ", n3, "]");
  }
  return absl::OkStatus();
}

absl::Status CheckSources(const Tensor& node, int count) {
  static constexpr const char* kRoles[] = {"src0", "src1", "src2", "src3"};
  for (int i = 0; i < count; ++i) {
    TESSERA_RETURN_IF_ERROR(CheckOperand(node, node.src[i], kRoles[i]));
  }
  return absl::OkStatus();
}

absl::Status CheckShapes(const Tensor& node) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  switch (node.op) {
    case Op::kNone:
    case Op::kView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kTranspose:
      return absl::OkStatus();
    case Op::kDup:
    case Op::kCpy:
    case Op::kCont:
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 1));
      if (a->NumElements() != node.NumElements()) {
        return Invalid(node, "src ", Describe(*a), " differs in element count");
      }
      return absl::OkStatus();
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 2));
      TESSERA_RETURN_IF_ERROR(CheckSameShape(node, node, "dst", *a));
      if (node.IsEmpty()) return absl::OkStatus();
      return CheckBroadcast(node, *b, "b", *a);
    case Op::kScale:
    case Op::kSqr:
    case Op::kSqrt:
    case Op::kLog:
    case Op::kUnary:
    case Op::kNorm:
    case Op::kRmsNorm:
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 1));
      if ((node.op == Op::kNorm || node.op == Op::kRmsNorm) &&
          !(node.param<float>(0) >= 0.0f)) {
        return Invalid(node, "eps ", node.param<float>(0), " must be >= 0");
      }
      return CheckSameShape(node, node, "dst", *a);
    case Op::kGlu: {
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 1));
      if (b != nullptr) {
        TESSERA_RETURN_IF_ERROR(CheckOperand(node, b, "b"));
        TESSERA_RETURN_IF_ERROR(CheckSameShape(node, *b, "b", *a));
        return CheckSameShape(node, node, "dst", *a);
      }
      if (a->ne[0] % 2 != 0) {
        return Invalid(node, "a ", Describe(*a), " has an odd row length");
      }
      const int64_t ne[kMaxDims] = {a->ne[0] / 2, a->ne[1], a->ne[2], a->ne[3]};
      return CheckShape(node, node, "dst", ne);
    }
    case Op::kSumRows:
    case Op::kMean: {
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 1));
      const int64_t ne[kMaxDims] = {1, a->ne[1], a->ne[2], a->ne[3]};
      return CheckShape(node, node, "dst", ne);
    }
    case Op::kArgmax: {
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 1));
      if (a->ne[2] != 1 || a->ne[3] != 1) {
        return Invalid(node, "a ", Describe(*a), " must be a matrix");
      }
      const int64_t ne[kMaxDims] = {a->ne[1], 1, 1, 1};
      return CheckShape(node, node, "dst", ne);
    }
    case Op::kArgsort:
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 1));
      return CheckSameShape(node, node, "dst", *a);
    case Op::kMulMat: {
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 2));
      if (a->ne[0] != b->ne[0] || a->ne[2] <= 0 || a->ne[3] <= 0 ||
          b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0) {
        return Invalid(node, "a ", Describe(*a), " and b ", Describe(*b),
                       " do not multiply");
      }
      const int64_t ne[kMaxDims] = {a->ne[1], b->ne[1], b->ne[2], b->ne[3]};
      return CheckShape(node, node, "dst", ne);
    }
    case Op::kGetRows: {
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 2));
      if (b->ne[3] != 1 || b->ne[1] != a->ne[2] || b->ne[2] != a->ne[3]) {
        return Invalid(node, "b ", Describe(*b), " must be [n, ", a->ne[2],
                       ", ", a->ne[3], ", 1]");
      }
      const int64_t ne[kMaxDims] = {a->ne[0], b->ne[0], b->ne[1], b->ne[2]};
      return CheckShape(node, node, "dst", ne);
    }
    case Op::kSetRows: {
      // src = {b: the rows, c: their indices}; the node is the destination.
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 2));
      const Tensor& rows = *a;
      const Tensor& c = *b;
      if (node.ne[0] != rows.ne[0] || node.ne[2] != rows.ne[2] ||
          node.ne[3] != rows.ne[3]) {
        return Invalid(node, "b ", Describe(rows), " does not fit its rows");
      }
      if (c.ne[0] != rows.ne[1] || c.ne[3] != 1 || c.ne[1] <= 0 ||
          c.ne[2] <= 0 || rows.ne[2] % c.ne[1] != 0 ||
          rows.ne[3] % c.ne[2] != 0) {
        return Invalid(node, "c ", Describe(c), " does not index the rows of ",
                       Describe(rows));
      }
      return absl::OkStatus();
    }
    case Op::kSoftMax:
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 1));
      TESSERA_RETURN_IF_ERROR(CheckSameShape(node, node, "dst", *a));
      if (b == nullptr) return absl::OkStatus();
      return CheckMask(node, *b, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
    case Op::kRope: {
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 2));
      TESSERA_RETURN_IF_ERROR(CheckSameShape(node, node, "dst", *a));
      const int64_t pos_ne[kMaxDims] = {a->ne[2], 1, 1, 1};
      TESSERA_RETURN_IF_ERROR(CheckShape(node, *b, "pos", pos_ne));
      const int32_t n_dims = node.op_params[1];
      const int32_t mode = node.op_params[2];
      if (n_dims < 0 || n_dims % 2 != 0 || n_dims > a->ne[0]) {
        return Invalid(node, "n_dims ", n_dims, " must be even and in [0, ",
                       a->ne[0], "]");
      }
      if (mode != kRopeNormal && mode != kRopeNeox) {
        return Invalid(node, "unknown mode ", mode);
      }
      return absl::OkStatus();
    }
    case Op::kConcat: {
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 2));
      const int32_t dim = node.op_params[0];
      if (dim < 0 || dim >= kMaxDims) {
        return Invalid(node, "dim ", dim, " is not in [0, 4)");
      }
      int64_t ne[kMaxDims];
      for (int i = 0; i < kMaxDims; ++i) {
        if (i != dim && a->ne[i] != b->ne[i]) {
          return Invalid(node, "a ", Describe(*a), " and b ", Describe(*b),
                         " differ in dimension ", i);
        }
        ne[i] = i == dim ? a->ne[i] + b->ne[i] : a->ne[i];
      }
      return CheckShape(node, node, "dst", ne);
    }
    case Op::kFlashAttnExt: {
      TESSERA_RETURN_IF_ERROR(CheckSources(node, 3));
      const Tensor& q = *a;
      const Tensor& k = *b;
      const Tensor& v = *node.src[2];
      if (k.ne[0] != q.ne[0] || k.ne[2] <= 0 || k.ne[3] <= 0 ||
          q.ne[2] % k.ne[2] != 0 || q.ne[3] % k.ne[3] != 0) {
        return Invalid(node, "k ", Describe(k), " does not fit q ",
                       Describe(q));
      }
      if (v.ne[1] != k.ne[1] || v.ne[2] != k.ne[2] || v.ne[3] != k.ne[3]) {
        return Invalid(node, "v ", Describe(v), " does not fit k ",
                       Describe(k));
      }
      const int64_t ne[kMaxDims] = {v.ne[0], q.ne[2], q.ne[1], q.ne[3]};
      TESSERA_RETURN_IF_ERROR(CheckShape(node, node, "dst", ne));
      if (node.src[3] == nullptr) return absl::OkStatus();
      return CheckMask(node, *node.src[3], k.ne[1], q.ne[1], q.ne[2], q.ne[3]);
    }
  }
  return Invalid(node, "unknown op");
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
  args.corr_low = std::max(
      0.0f,
      std::floor(YarnCorrDim(args.n_dims, n_ctx_orig, beta_fast,
                             args.freq_base)));
  args.corr_high = std::min(
      static_cast<float>(args.n_dims - 1),
      std::ceil(YarnCorrDim(args.n_dims, n_ctx_orig, beta_slow,
                            args.freq_base)));
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
  return absl::Status(s.code(), absl::StrCat(Where(node), Describe(node), ": ",
                                             s.message()));
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
  if (!FitsIndices(node)) return false;
  for (const Tensor* src : node.src) {
    if (src != nullptr && (!Valid(src) || !FitsIndices(*src))) return false;
  }
  return node.op != Op::kMulMat || MulMatSupported(node);
}

absl::Status CudaCheckNode(const Tensor& node) {
  if (!CudaSupportsNode(node)) {
    return Invalid(node, "the CUDA device does not support this node");
  }
  TESSERA_RETURN_IF_ERROR(CheckOperand(node, &node, "dst"));
  return CheckShapes(node);
}

size_t CudaScratchBytes(const Tensor& node) {
  return node.op == Op::kMulMat ? MulMatScratchBytes(node) : 0;
}

absl::Status CudaEnqueueNode(const CudaComputeContext& ctx,
                             const Tensor& node) {
  namespace k = cuda_kernels;
  const KTensor dst = ToKTensor(node);
  const Tensor* s0 = node.src[0];
  const Tensor* s1 = node.src[1];
  cudaStream_t stream = ctx.stream;
  switch (node.op) {
    case Op::kNone:
    case Op::kView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kTranspose:
      return absl::OkStatus();
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
                       scale ? node.param<float>(1) : 0.0f, dst,
                       ToKTensor(*s0), stream));
    }
    case Op::kGlu: {
      const KTensor b = s1 != nullptr ? ToKTensor(*s1) : KTensor{};
      return Launched(
          node,
          k::Glu(static_cast<GluOp>(node.op_params[0]) == GluOp::kGeGlu,
                 node.op_params[1] != 0, dst, ToKTensor(*s0),
                 s1 != nullptr ? &b : nullptr, stream));
    }
    case Op::kSumRows:
    case Op::kMean:
      return Launched(node, k::SumRows(node.op == Op::kMean, dst,
                                       ToKTensor(*s0), stream));
    case Op::kNorm:
    case Op::kRmsNorm:
      return Launched(node, k::Norm(node.op == Op::kRmsNorm,
                                    node.param<float>(0), dst, ToKTensor(*s0),
                                    stream));
    case Op::kArgmax:
      return Launched(node, k::Argmax(dst, ToKTensor(*s0), stream));
    case Op::kArgsort:
      return Launched(
          node,
          k::Argsort(node.op_params[0] ==
                         static_cast<int32_t>(SortOrder::kDescending),
                     dst, ToKTensor(*s0), stream));
    case Op::kMulMat:
      return EnqueueMulMat(ctx, node);
    case Op::kGetRows:
      return Launched(node, k::GetRows(dst, ToKTensor(*s0), ToKTensor(*s1),
                                       static_cast<int32_t>(node.op),
                                       ctx.error, stream));
    case Op::kSetRows:
      return Launched(node, k::SetRows(dst, ToKTensor(*s0), ToKTensor(*s1),
                                       static_cast<int32_t>(node.op),
                                       ctx.error, stream));
    case Op::kSoftMax: {
      const KTensor mask = s1 != nullptr ? ToKTensor(*s1) : KTensor{};
      return Launched(node, k::SoftMax(dst, ToKTensor(*s0),
                                       s1 != nullptr ? &mask : nullptr,
                                       node.param<float>(0),
                                       node.param<float>(1), stream));
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
          node, k::FlashAttn(dst, ToKTensor(*s0), ToKTensor(*s1),
                             ToKTensor(*node.src[2]),
                             m != nullptr ? &mask : nullptr,
                             node.param<float>(0), node.param<float>(1),
                             node.param<float>(2), stream));
    }
  }
  return Invalid(node, "unknown op");
}

}  // namespace tessera
