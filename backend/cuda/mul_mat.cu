// Matrix-vector products for MUL_MAT with one column per batch: one warp
// per output value. Quantized weights are dequantized on the fly (block by
// block, each lane taking whole Q8_0/Q4_0 blocks or 8 values of every
// K-quant super-block), so the weights are read once and never expanded in
// memory; other types go value by value.

#include "backend/cuda/kernel_common.cuh"

namespace tessera::cuda_kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

// 32 values of b starting at `b`, contiguous (and 16-byte aligned when
// kVector) or with byte stride `nb0`.
template <bool kVector>
__device__ __forceinline__ void LoadB32(const char* b, int64_t nb0,
                                        float (&out)[kQK]) {
  if constexpr (kVector) {
    const float4* v = reinterpret_cast<const float4*>(b);
#pragma unroll
    for (int i = 0; i < kQK / 4; ++i) {
      const float4 f = v[i];
      out[4 * i] = f.x;
      out[4 * i + 1] = f.y;
      out[4 * i + 2] = f.z;
      out[4 * i + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kQK; ++i) {
      out[i] = *reinterpret_cast<const float*>(b + i * nb0);
    }
  }
}

// dot(block of `type` at `block`, 32 values of b).
template <bool kVector>
__device__ __forceinline__ float DotBlock(int32_t type, const char* block,
                                          const char* b, int64_t nb0) {
  float y[kQK];
  LoadB32<kVector>(b, nb0, y);
  const uint16_t* qs = reinterpret_cast<const uint16_t*>(block + 2);
  float sum = 0.0f;
  if (type == kQ8_0) {
#pragma unroll
    for (int i = 0; i < kQK / 2; ++i) {
      const uint16_t pair = qs[i];
      sum += static_cast<float>(static_cast<int8_t>(pair & 0xff)) * y[2 * i];
      sum += static_cast<float>(static_cast<int8_t>(pair >> 8)) * y[2 * i + 1];
    }
  } else {
#pragma unroll
    for (int i = 0; i < kQK / 4; ++i) {
      const uint16_t pair = qs[i];
      const int lo0 = pair & 0xf;
      const int hi0 = (pair >> 4) & 0xf;
      const int lo1 = (pair >> 8) & 0xf;
      const int hi1 = pair >> 12;
      sum += static_cast<float>(lo0 - 8) * y[2 * i];
      sum += static_cast<float>(lo1 - 8) * y[2 * i + 1];
      sum += static_cast<float>(hi0 - 8) * y[2 * i + 16];
      sum += static_cast<float>(hi1 - 8) * y[2 * i + 17];
    }
  }
  return sum * BlockScale(block);
}

// The lane's part of dot(K-quant row x, b values at y): 8 consecutive
// values of every super-block (one sub-block, so one factor and offset).
__device__ __forceinline__ float DotKQuantRow(int32_t type, const char* x,
                                              const char* y, int64_t nb0,
                                              int64_t k, int lane) {
  constexpr int kPerLane = kQK_K / kWarpSize;
  const int bytes = KBlockBytes(type);
  const int j0 = lane * kPerLane;
  float sum = 0.0f;
  for (int64_t blk = 0; blk < k / kQK_K; ++blk) {
    const char* block = x + blk * bytes;
    const char* yb = y + (blk * kQK_K + j0) * nb0;
    const float2 f = KFactors(type, block, j0);
    float dot = 0.0f;
    float ysum = 0.0f;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const float v = *reinterpret_cast<const float*>(yb + t * nb0);
      dot += static_cast<float>(KLevel(type, block, j0 + t)) * v;
      ysum += v;
    }
    sum += f.x * dot - f.y * ysum;
  }
  return sum;
}

// dst[i, 0, i2, i3] = dot(a row (i, i2 / r2, i3 / r3), b row (0, i2, i3)).
template <bool kVector>
__global__ void MatVecKernel(KTensor dst, KTensor a, KTensor b,
                             int64_t outputs) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t m = dst.ne[0];
  const int64_t r2 = b.ne[2] / a.ne[2];
  const int64_t r3 = b.ne[3] / a.ne[3];
  const int64_t k = a.ne[0];
  const bool kquant = IsKQuant(a.type);
  const bool quantized = IsQuantized(a.type) && !kquant;
  const int block_bytes = a.type == kQ8_0 ? kQ8Bytes : kQ4Bytes;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock +
                   threadIdx.x / kWarpSize;
       w < outputs; w += warps) {
    const int64_t i = w % m;
    const int64_t batch = w / m;
    const int64_t i2 = batch % b.ne[2];
    const int64_t i3 = batch / b.ne[2];
    const char* x = RowPtr(a, i, i2 / r2, i3 / r3);
    const char* y = RowPtr(b, 0, i2, i3);
    float sum = 0.0f;
    if (kquant) {
      sum = DotKQuantRow(a.type, x, y, b.nb[0], k, lane);
    } else if (quantized) {
      for (int64_t blk = lane; blk < k / kQK; blk += kWarpSize) {
        sum += DotBlock<kVector>(a.type, x + blk * block_bytes,
                                 y + blk * kQK * b.nb[0], b.nb[0]);
      }
    } else {
      for (int64_t j = lane; j < k; j += kWarpSize) {
        sum += LoadF(a.type, x + j * a.nb[0]) *
               *reinterpret_cast<const float*>(y + j * b.nb[0]);
      }
    }
    sum = WarpSum(sum);
    if (lane == 0) {
      *reinterpret_cast<float*>(RowPtr(dst, 0, i2, i3) + i * dst.nb[0]) = sum;
    }
  }
}

}  // namespace

cudaError_t MatVec(const KTensor& dst, const KTensor& a, const KTensor& b,
                   cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t outputs = dst.ne[0] * dst.ne[2] * dst.ne[3];
  int64_t blocks = (outputs + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > (int64_t{1} << 24)) blocks = int64_t{1} << 24;
  const unsigned grid = static_cast<unsigned>(blocks);
  const int threads = kWarpsPerBlock * kWarpSize;
  // float4 loads of b need contiguous values and 16-byte aligned blocks.
  const bool vector = b.nb[0] == sizeof(float) &&
                      reinterpret_cast<uintptr_t>(b.data) % 16 == 0 &&
                      b.nb[2] % 16 == 0 && b.nb[3] % 16 == 0;
  if (vector) {
    MatVecKernel<true><<<grid, threads, 0, stream>>>(dst, a, b, outputs);
  } else {
    MatVecKernel<false><<<grid, threads, 0, stream>>>(dst, a, b, outputs);
  }
  return cudaGetLastError();
}

}  // namespace tessera::cuda_kernels
