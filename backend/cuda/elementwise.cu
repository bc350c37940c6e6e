// Elementwise kernels: ADD, SUB, MUL, DIV (b broadcast to a), SCALE, SQR,
// SQRT, LOG, the unary ops and GLU. One RowsLaunch over the rows of dst;
// each value is read, computed in float and written by one thread, so dst
// may alias a. Binary ops on flat F32 tensors (the usual case) go a float4
// at a time over the flat values instead.

#include "backend/cuda/kernel_common.cuh"

namespace tessera::cuda_kernels {
namespace {

// GELU, tanh approximation, as x sigmoid(2u) (= 0.5 x (1 + tanh(u))) from
// e^-|2u|: 1 + tanhf(u) loses every bit of a negative x's tiny result to
// cancellation (GELU(-6) would be -0, not -6e-9).
__device__ __forceinline__ float Gelu(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  const float u2 = 2.0f * kSqrt2OverPi * x * (1.0f + kCoefA * x * x);
  const float t = expf(-fabsf(u2));
  const float r = 1.0f / (1.0f + t);
  return x * (u2 >= 0.0f ? r : t * r);
}

__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float ApplyMap(MapOp op, float x, float scale,
                                          float bias) {
  switch (op) {
    case MapOp::kScale:
      return x * scale + bias;
    case MapOp::kSqr:
      return x * x;
    case MapOp::kSqrt:
      return sqrtf(x);
    case MapOp::kLog:
      return logf(x);
    case MapOp::kNeg:
      return -x;
    case MapOp::kRelu:
      return x > 0.0f ? x : 0.0f;
    case MapOp::kGelu:
      return Gelu(x);
    case MapOp::kSilu:
      return Silu(x);
    case MapOp::kSigmoid:
      return 1.0f / (1.0f + expf(-x));
    case MapOp::kTanh:
      return tanhf(x);
    case MapOp::kExp:
      return expf(x);
  }
  return x;
}

template <BinaryOp kOp>
__device__ __forceinline__ float ApplyBinary(float x, float y) {
  if constexpr (kOp == BinaryOp::kAdd) return x + y;
  if constexpr (kOp == BinaryOp::kSub) return x - y;
  if constexpr (kOp == BinaryOp::kMul) return x * y;
  return x / y;
}

template <BinaryOp kOp>
__global__ void BinaryKernel(KTensor dst, KTensor a, KTensor b, int64_t rows) {
  const int ne1 = static_cast<int>(dst.ne[1]);
  const int ne2 = static_cast<int>(dst.ne[2]);
  const int64_t ne0 = dst.ne[0];
  const int64_t bne0 = b.ne[0];
  for (int64_t r = FirstRow(); r < rows; r += RowStride()) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    const char* x = RowPtr(a, d.i1, d.i2, d.i3);
    const char* y = RowPtr(b, d.i1 % b.ne[1], d.i2 % b.ne[2], d.i3 % b.ne[3]);
    for (int64_t i0 = threadIdx.x; i0 < ne0; i0 += blockDim.x) {
      const int64_t j0 = i0 < bne0 ? i0 : i0 % bne0;
      const float v = ApplyBinary<kOp>(LoadF(a.type, x + i0 * a.nb[0]),
                                       LoadF(b.type, y + j0 * b.nb[0]));
      StoreF(dst.type, v, out + i0 * dst.nb[0]);
    }
  }
}

// BinaryKernel over F32 tensors laid out flat (see BinaryFits): value i of
// dst from value i of a and value i mod |b| of b, a float4 at a time.
template <BinaryOp kOp>
__global__ void BinaryFlatKernel(float4* dst, const float4* a, const float4* b,
                                 int64_t n4, int64_t b4) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n4; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 x = a[i];
    const float4 y = b[b4 == n4 ? i : i % b4];
    dst[i] = make_float4(ApplyBinary<kOp>(x.x, y.x), ApplyBinary<kOp>(x.y, y.y),
                         ApplyBinary<kOp>(x.z, y.z), ApplyBinary<kOp>(x.w, y.w));
  }
}

__global__ void MapKernel(MapOp op, float scale, float bias, KTensor dst,
                          KTensor a, int64_t rows) {
  const int ne1 = static_cast<int>(dst.ne[1]);
  const int ne2 = static_cast<int>(dst.ne[2]);
  for (int64_t r = FirstRow(); r < rows; r += RowStride()) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    const char* x = RowPtr(a, d.i1, d.i2, d.i3);
    for (int64_t i0 = threadIdx.x; i0 < dst.ne[0]; i0 += blockDim.x) {
      const float v = LoadF(a.type, x + i0 * a.nb[0]);
      StoreF(dst.type, ApplyMap(op, v, scale, bias), out + i0 * dst.nb[0]);
    }
  }
}

// act(x) * g per value of dst's rows; x and g come from `b` when has_b, or
// from the two halves of a's row (offset n), swapped when `swapped`.
__global__ void GluKernel(bool geglu, bool swapped, KTensor dst, KTensor a,
                          KTensor b, bool has_b, int64_t rows) {
  const int ne1 = static_cast<int>(dst.ne[1]);
  const int ne2 = static_cast<int>(dst.ne[2]);
  const int64_t n = dst.ne[0];
  for (int64_t r = FirstRow(); r < rows; r += RowStride()) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    const char* ra = RowPtr(a, d.i1, d.i2, d.i3);
    const char* rb = has_b ? RowPtr(b, d.i1, d.i2, d.i3) : nullptr;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float x = LoadF(a.type, ra + i * a.nb[0]);
      float g = has_b ? LoadF(b.type, rb + i * b.nb[0])
                      : LoadF(a.type, ra + (i + n) * a.nb[0]);
      if (swapped) {
        const float t = x;
        x = g;
        g = t;
      }
      const float act = geglu ? Gelu(x) : Silu(x);
      StoreF(dst.type, act * g, out + i * dst.nb[0]);
    }
  }
}

// Whether BinaryFlatKernel computes dst = a op b: all F32, contiguous and
// 16-byte aligned, a of dst's shape, b of dst's shape in its first dims
// and 1 in the rest (so b repeats every |b| values), |b| a multiple of 4.
bool BinaryFits(const KTensor& dst, const KTensor& a, const KTensor& b) {
  for (const KTensor* t : {&dst, &a, &b}) {
    if (t->type != kF32 || !IsContiguous(*t, sizeof(float)) ||
        reinterpret_cast<uintptr_t>(t->data) % 16 != 0) {
      return false;
    }
  }
  int dims = 4;
  while (dims > 0 && b.ne[dims - 1] == 1) --dims;
  for (int i = 0; i < 4; ++i) {
    if (a.ne[i] != dst.ne[i] || (i < dims && b.ne[i] != dst.ne[i])) {
      return false;
    }
  }
  return NumValues(b) % 4 == 0;
}

template <BinaryOp kOp>
void LaunchBinary(const KTensor& dst, const KTensor& a, const KTensor& b,
                  cudaStream_t stream) {
  if (BinaryFits(dst, a, b)) {
    const int64_t n4 = NumValues(dst) / 4;
    int64_t blocks = (n4 + 255) / 256;
    if (blocks > (int64_t{1} << 16)) blocks = int64_t{1} << 16;
    BinaryFlatKernel<kOp><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        reinterpret_cast<float4*>(dst.data),
        reinterpret_cast<const float4*>(a.data),
        reinterpret_cast<const float4*>(b.data), n4, NumValues(b) / 4);
    return;
  }
  const int64_t rows = NumRows(dst);
  const RowLaunch l = RowsLaunch(dst.ne[0], rows);
  BinaryKernel<kOp><<<l.grid, l.block, 0, stream>>>(dst, a, b, rows);
}

}  // namespace

cudaError_t Binary(BinaryOp op, const KTensor& dst, const KTensor& a,
                   const KTensor& b, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  switch (op) {
    case BinaryOp::kAdd:
      LaunchBinary<BinaryOp::kAdd>(dst, a, b, stream);
      break;
    case BinaryOp::kSub:
      LaunchBinary<BinaryOp::kSub>(dst, a, b, stream);
      break;
    case BinaryOp::kMul:
      LaunchBinary<BinaryOp::kMul>(dst, a, b, stream);
      break;
    case BinaryOp::kDiv:
      LaunchBinary<BinaryOp::kDiv>(dst, a, b, stream);
      break;
  }
  return cudaGetLastError();
}

cudaError_t Map(MapOp op, float scale, float bias, const KTensor& dst,
                const KTensor& a, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(dst);
  const RowLaunch l = RowsLaunch(dst.ne[0], rows);
  MapKernel<<<l.grid, l.block, 0, stream>>>(op, scale, bias, dst, a, rows);
  return cudaGetLastError();
}

cudaError_t Glu(bool geglu, bool swapped, const KTensor& dst, const KTensor& a,
                const KTensor* b, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(dst);
  const RowLaunch l = RowsLaunch(dst.ne[0], rows);
  GluKernel<<<l.grid, l.block, 0, stream>>>(geglu, swapped, dst, a,
                                            b != nullptr ? *b : KTensor{},
                                            b != nullptr, rows);
  return cudaGetLastError();
}

}  // namespace tessera::cuda_kernels
