#ifndef TESSERA_BACKEND_CUDA_KERNEL_COMMON_CUH_
#define TESSERA_BACKEND_CUDA_KERNEL_COMMON_CUH_

// Device helpers shared by the .cu files: typed loads and stores through
// byte strides, row coordinates, reductions and launch shapes.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernel_error.h"
#include "backend/cuda/kernels.h"

namespace tessera::cuda_kernels {

inline constexpr int kWarpSize = 32;
inline constexpr int kQK = 32;  // values per Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 block
inline constexpr int kQ8Bytes = 34;
inline constexpr int kQ4Bytes = 18;

// One value of a non-quantized type at `p`, as float (I32 rounds to
// nearest), and the reverse (I32 truncates toward zero and saturates; NaN
// becomes 0). Conversions round to nearest even, as graph/type.h does.
__device__ __forceinline__ float LoadF(int32_t type, const char* p) {
  switch (type) {
    case kF16:
      return __half2float(*reinterpret_cast<const __half*>(p));
    case kBF16:
      return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
    case kI32:
      return static_cast<float>(*reinterpret_cast<const int32_t*>(p));
    default:
      return *reinterpret_cast<const float*>(p);
  }
}

__device__ __forceinline__ void StoreF(int32_t type, float v, char* p) {
  switch (type) {
    case kF16:
      *reinterpret_cast<__half*>(p) = __float2half_rn(v);
      return;
    case kBF16:
      *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(v);
      return;
    case kI32:
      *reinterpret_cast<int32_t*>(p) = __float2int_rz(v);
      return;
    default:
      *reinterpret_cast<float*>(p) = v;
  }
}

__device__ __forceinline__ float BlockScale(const char* block) {
  return __half2float(*reinterpret_cast<const __half*>(block));
}

// K-quant super-blocks (graph/kquant.h has the layouts): 256 values in
// 84 (Q2_K), 110 (Q3_K), 144 (Q4_K), 176 (Q5_K) or 210 (Q6_K) bytes.
inline constexpr int kQK_K = 256;

__host__ __device__ __forceinline__ bool IsKQuant(int32_t type) {
  return type == kQ2_K || type == kQ3_K || type == kQ4_K || type == kQ5_K ||
         type == kQ6_K;
}

__host__ __device__ __forceinline__ int KBlockBytes(int32_t type) {
  switch (type) {
    case kQ2_K:
      return 84;
    case kQ3_K:
      return 110;
    case kQ4_K:
      return 144;
    case kQ5_K:
      return 176;
    default:
      return 210;
  }
}

// The factor and offset of the sub-block holding value j (0..255) of a
// K-quant super-block: value = factor * KLevel(...) - offset. Q4_K/Q5_K:
// the 6-bit scale and min of sub-block j / 32 unpacked from bytes 4..15;
// Q2_K: d and dmin times the 4-bit scale and min of j / 16; Q3_K and
// Q6_K: d times the scale of j / 16, no offset.
__device__ __forceinline__ float2 KFactors(int32_t type, const char* block,
                                           int j) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(block);
  if (type == kQ2_K) {
    const uint8_t sc = p[j / 16];
    const float d = __half2float(*reinterpret_cast<const __half*>(block + 80));
    const float dmin =
        __half2float(*reinterpret_cast<const __half*>(block + 82));
    return make_float2(d * (sc & 0x0F), dmin * (sc >> 4));
  }
  if (type == kQ3_K) {
    const uint8_t* packed = p + 96;
    const int g = j / 16;
    const int low = g < 8 ? packed[g] & 0x0F : packed[g - 8] >> 4;
    const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
    const float d = __half2float(*reinterpret_cast<const __half*>(block + 108));
    return make_float2(d * ((low | (high << 4)) - 32), 0.0f);
  }
  if (type == kQ6_K) {
    const float d = __half2float(*reinterpret_cast<const __half*>(block + 208));
    return make_float2(d * static_cast<int8_t>(p[192 + j / 16]), 0.0f);
  }
  const uint8_t* packed = p + 4;
  const int s = j / 32;
  int sc, m;
  if (s < 4) {
    sc = packed[s] & 63;
    m = packed[s + 4] & 63;
  } else {
    sc = (packed[s + 4] & 0x0F) | ((packed[s - 4] >> 6) << 4);
    m = (packed[s + 4] >> 4) | ((packed[s] >> 6) << 4);
  }
  const float d = __half2float(*reinterpret_cast<const __half*>(block));
  const float dmin = __half2float(*reinterpret_cast<const __half*>(block + 2));
  return make_float2(d * sc, dmin * m);
}

// The level of value j (0..255) of a K-quant super-block: 0..3 (Q2_K),
// -4..3 (Q3_K), 0..15 (Q4_K), 0..31 (Q5_K) or -32..31 (Q6_K).
__device__ __forceinline__ int KLevel(int32_t type, const char* block, int j) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(block);
  if (type == kQ2_K || type == kQ3_K) {
    // Bits 2t of qs[32h + l] for value 128h + 32t + l; Q3_K's third bit is
    // bit 4h + t of hmask[l].
    const int h = j / 128;
    const int t = (j % 128) / 32;
    const int l = j % 32;
    const int qs = type == kQ2_K ? 16 : 32;
    const int low = (p[qs + 32 * h + l] >> (2 * t)) & 3;
    if (type == kQ2_K) return low;
    return (low | (((p[l] >> (4 * h + t)) & 1) << 2)) - 4;
  }
  if (type == kQ6_K) {
    const int h = j / 128;
    const int t = (j % 128) / 32;
    const int l = j % 32;
    const int lo = (p[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 0x0F;
    const int hi = (p[128 + 32 * h + l] >> (2 * t)) & 3;
    return (lo | (hi << 4)) - 32;
  }
  const int c = j / 64;
  const int half = (j % 64) / 32;
  const int l = j % 32;
  const int qs = type == kQ4_K ? 16 : 48;
  int q = (p[qs + 32 * c + l] >> (4 * half)) & 0x0F;
  if (type == kQ5_K) q |= ((p[16 + l] >> (2 * c + half)) & 1) << 4;
  return q;
}

// Value i0 of a K-quant row starting at `row`.
__device__ __forceinline__ float LoadKQuant(int32_t type, const char* row,
                                            int64_t i0) {
  const char* block = row + (i0 / kQK_K) * KBlockBytes(type);
  const int j = static_cast<int>(i0 % kQK_K);
  const float2 f = KFactors(type, block, j);
  return f.x * static_cast<float>(KLevel(type, block, j)) - f.y;
}

// Q4_1, Q5_0 and Q5_1 blocks (graph/block_quant.h): 32 values in 20, 22 or
// 24 bytes.
__host__ __device__ __forceinline__ bool IsBlockQuant(int32_t type) {
  return type == kQ4_1 || type == kQ5_0 || type == kQ5_1;
}

__host__ __device__ __forceinline__ int BlockQuantBytes(int32_t type) {
  return type == kQ4_1 ? 20 : type == kQ5_0 ? 22 : 24;
}

// The level (0..31) of value j (0..31) of such a block: the low nibble of
// qs[j] (j < 16) or the high nibble of qs[j - 16], and for Q5 bit j of the
// fifth bits. Fields are read a byte at a time (blocks are 2-byte aligned).
__device__ __forceinline__ int BlockQuantLevel(int32_t type, const char* block,
                                               int j) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(block);
  const int qs = type == kQ4_1 ? 4 : type == kQ5_0 ? 6 : 8;
  int q = (p[qs + (j & 15)] >> (j < 16 ? 0 : 4)) & 0x0F;
  if (type != kQ4_1) {
    const int qh = type == kQ5_0 ? 2 : 4;
    q |= ((p[qh + j / 8] >> (j % 8)) & 1) << 4;
  }
  return q;
}

// The block's factor and offset: value = factor * level - offset, with
// d and -m (Q4_1, Q5_1) or d and 16 d (Q5_0). Both products are exact (a
// 5-bit level times an fp16 scale), so the value is the reference's.
__device__ __forceinline__ float2 BlockQuantFactors(int32_t type,
                                                    const char* block) {
  const float d = BlockScale(block);
  if (type == kQ5_0) return make_float2(d, 16.0f * d);
  return make_float2(d, -BlockScale(block + 2));
}

// Value i0 of a quantized row starting at `row` (blocks are contiguous).
__device__ __forceinline__ float LoadQuantized(int32_t type, const char* row,
                                               int64_t i0) {
  if (IsKQuant(type)) return LoadKQuant(type, row, i0);
  if (IsBlockQuant(type)) {
    const char* block = row + (i0 / kQK) * BlockQuantBytes(type);
    const float2 f = BlockQuantFactors(type, block);
    return f.x * static_cast<float>(BlockQuantLevel(type, block, i0 % kQK)) -
           f.y;
  }
  const int64_t b = i0 / kQK;
  const int j = static_cast<int>(i0 % kQK);
  if (type == kQ8_0) {
    const char* block = row + b * kQ8Bytes;
    return static_cast<float>(static_cast<int8_t>(block[2 + j])) *
           BlockScale(block);
  }
  const char* block = row + b * kQ4Bytes;
  const uint8_t q = static_cast<uint8_t>(block[2 + (j & 15)]);
  const int v = j < 16 ? (q & 15) : (q >> 4);
  return static_cast<float>(v - 8) * BlockScale(block);
}

__device__ __forceinline__ bool IsQuantized(int32_t type) {
  return type == kQ8_0 || type == kQ4_0 || IsKQuant(type) || IsBlockQuant(type);
}

// Value i0 of the row at `row` of tensor `t` (any type), as float.
__device__ __forceinline__ float LoadValue(const KTensor& t, const char* row,
                                           int64_t i0) {
  if (IsQuantized(t.type)) return LoadQuantized(t.type, row, i0);
  return LoadF(t.type, row + i0 * t.nb[0]);
}

struct RowIndex {
  int i1;
  int i2;
  int i3;
};

// Coordinates of row `r` of a tensor with ne[1] = ne1, ne[2] = ne2.
__device__ __forceinline__ RowIndex RowAt(int r, int ne1, int ne2) {
  RowIndex idx;
  idx.i1 = r % ne1;
  r /= ne1;
  idx.i2 = r % ne2;
  idx.i3 = r / ne2;
  return idx;
}

__device__ __forceinline__ char* RowPtr(const KTensor& t, int64_t i1,
                                        int64_t i2, int64_t i3) {
  return t.data + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ float WarpMin(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fminf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum and max over a block whose blockDim.x is a multiple of 32 (and
// blockDim.y == 1); every thread gets the result.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float partial[kWarpSize];
  v = WarpSum(v);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  __syncthreads();  // a previous reduction has read `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / kWarpSize ? partial[lane] : 0.0f;
  return WarpSum(v);
}

__device__ __forceinline__ float BlockMax(float v) {
  __shared__ float partial[kWarpSize];
  v = WarpMax(v);
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / kWarpSize ? partial[lane] : -INFINITY;
  return WarpMax(v);
}

// Claims `error` for this failure unless an earlier one holds it.
__device__ __forceinline__ void ReportError(KernelError* error, int32_t code,
                                            int32_t op, int64_t value,
                                            int64_t limit) {
  if (atomicCAS(&error->code, 0, code) == 0) {
    error->op = op;
    error->value = value;
    error->limit = limit;
  }
}

// ALiBi slope of `head` of `n_head` (graph/ops.h's SOFT_MAX formula); 1
// when max_bias <= 0.
__device__ __forceinline__ float AlibiSlope(float max_bias, int head,
                                            int n_head) {
  if (!(max_bias > 0.0f)) return 1.0f;
  int h = 1;
  while (h * 2 <= n_head) h *= 2;
  const float m0 = powf(2.0f, -max_bias / static_cast<float>(h));
  const float m1 = powf(2.0f, -(max_bias / 2.0f) / static_cast<float>(h));
  return head < h ? powf(m0, static_cast<float>(head + 1))
                  : powf(m1, static_cast<float>(2 * (head - h) + 1));
}

inline int64_t NumRows(const KTensor& t) { return t.ne[1] * t.ne[2] * t.ne[3]; }

inline bool IsEmpty(const KTensor& t) {
  return t.ne[0] == 0 || t.ne[1] == 0 || t.ne[2] == 0 || t.ne[3] == 0;
}

// A launch over rows: blockDim (tx, ty) puts ty rows in a block with tx
// threads (a power of two, 32..256) along each row; blocks stride over
// rows (see ForEachRow).
struct RowLaunch {
  dim3 grid;
  dim3 block;
};

inline RowLaunch RowsLaunch(int64_t ne0, int64_t rows) {
  int tx = kWarpSize;
  while (tx < ne0 && tx < 256) tx *= 2;
  const int ty = 256 / tx;
  int64_t blocks = (rows + ty - 1) / ty;
  if (blocks > (int64_t{1} << 24)) blocks = int64_t{1} << 24;
  if (blocks < 1) blocks = 1;
  return {dim3(static_cast<unsigned>(blocks)), dim3(tx, ty)};
}

// The first row of this thread's block-row in a RowsLaunch, and the stride.
__device__ __forceinline__ int64_t FirstRow() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
}
__device__ __forceinline__ int64_t RowStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.y;
}

// Threads per block for one-block-per-row reductions over `ne0` values.
inline int ReductionThreads(int64_t ne0) {
  if (ne0 <= 256) return kWarpSize;
  if (ne0 <= 2048) return 256;
  return 1024;
}

// Blocks for one block per row, capped; kernels stride over the rest.
inline unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(rows < (int64_t{1} << 24) ? rows
                                                         : int64_t{1} << 24);
}

// Whether t's values lie one after another in row-major order, `size`
// bytes each.
inline bool IsContiguous(const KTensor& t, int64_t size) {
  int64_t stride = size;
  for (int i = 0; i < 4; ++i) {
    if (t.ne[i] > 1 && t.nb[i] != stride) return false;
    stride *= t.ne[i];
  }
  return true;
}

inline int64_t NumValues(const KTensor& t) {
  return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
}

// Rows held in registers by row kernels (RMS_NORM, SOFT_MAX): F32 rows of
// a multiple of 4 values, contiguous and 16-byte aligned, read once as
// float4s, thread t of the block taking float4s t, t + blockDim.x, ... (at
// most kVec of them).
// Whether every row of t starts at a multiple of `bytes`.
inline bool RowsAligned(const KTensor& t, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(t.data) % bytes == 0 &&
         t.nb[1] % bytes == 0 && t.nb[2] % bytes == 0 && t.nb[3] % bytes == 0;
}

inline bool RowsFitRegisters(const KTensor& t) {
  return t.type == kF32 && t.nb[0] == sizeof(float) && t.ne[0] % 4 == 0 &&
         RowsAligned(t, 16);
}

// Launch shape of rows of n values in registers: threads per block and
// float4s per thread (1, 2, 4 or 8); vec 0 when rows are too long (over
// 32768 values).
struct RegisterRows {
  int threads;
  int vec;
};

inline RegisterRows RegisterRowsFor(int64_t n) {
  const int64_t n4 = n / 4;
  const int threads = n4 <= 256 * 8 ? 256 : 1024;
  const int64_t per_thread = (n4 + threads - 1) / threads;
  int vec = 1;
  while (vec < per_thread) vec *= 2;
  return {threads, vec <= 8 ? vec : 0};
}

// Calls f(std::integral_constant<int, V>()) for V = vec (1, 2, 4 or 8), so
// that a launcher instantiates its kernel for the RegisterRows it got.
template <typename F>
void WithRegisterVec(int vec, F&& f) {
  switch (vec) {
    case 1:
      f(std::integral_constant<int, 1>());
      break;
    case 2:
      f(std::integral_constant<int, 2>());
      break;
    case 4:
      f(std::integral_constant<int, 4>());
      break;
    default:
      f(std::integral_constant<int, 8>());
      break;
  }
}

// Loads this thread's float4s of the row at `row` (n4 float4s); those past
// the end read as `fill`.
template <int kVec>
__device__ __forceinline__ void LoadRow4(const char* row, int64_t n4,
                                         float fill, float4 (&v)[kVec]) {
  const float4* p = reinterpret_cast<const float4*>(row);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    v[j] = i < n4 ? p[i] : make_float4(fill, fill, fill, fill);
  }
}

template <int kVec>
__device__ __forceinline__ void StoreRow4(char* row, int64_t n4,
                                          const float4 (&v)[kVec]) {
  float4* p = reinterpret_cast<float4*>(row);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * blockDim.x;
    if (i < n4) p[i] = v[j];
  }
}

}  // namespace tessera::cuda_kernels

#endif  // TESSERA_BACKEND_CUDA_KERNEL_COMMON_CUH_
