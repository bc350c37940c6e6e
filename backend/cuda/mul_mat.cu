// Matrix-vector products for MUL_MAT with one column per batch. Quantized
// weights are dequantized on the fly, so the weights are read once and
// never expanded in memory.
//
// The usual case (activations contiguous and 16-byte aligned; rows of F32,
// F16 or BF16 16-byte aligned and a multiple of 8 values, or of a
// quantized type) runs MatVecRowsKernel: 4 weight rows per block, each
// thread taking groups of 8 values of all of them, so that the loads of
// one row's group are wide and neighbouring threads' are adjacent (the
// block streams the rows' bytes), and one load of 8 activations serves
// every row. Any other layout runs MatVecKernel: one warp per output
// value, each lane taking whole 32-value blocks, 8 values of every K-quant
// super-block, or single values.

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

// dot(Q4_1, Q5_0 or Q5_1 block at `block`, 32 values of b).
template <bool kVector>
__device__ __forceinline__ float DotBlockQuant(int32_t type, const char* block,
                                               const char* b, int64_t nb0) {
  float y[kQK];
  LoadB32<kVector>(b, nb0, y);
  float dot = 0.0f;
  float ysum = 0.0f;
#pragma unroll
  for (int j = 0; j < kQK; ++j) {
    dot += static_cast<float>(BlockQuantLevel(type, block, j)) * y[j];
    ysum += y[j];
  }
  const float2 f = BlockQuantFactors(type, block);
  return f.x * dot - f.y * ysum;
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
  const bool block_quant = IsBlockQuant(a.type);
  const bool quantized = IsQuantized(a.type) && !kquant && !block_quant;
  const int block_bytes = a.type == kQ8_0   ? kQ8Bytes
                          : a.type == kQ4_0 ? kQ4Bytes
                                            : BlockQuantBytes(a.type);
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
    } else if (block_quant) {
      for (int64_t blk = lane; blk < k / kQK; blk += kWarpSize) {
        sum += DotBlockQuant<kVector>(a.type, x + blk * block_bytes,
                                      y + blk * kQK * b.nb[0], b.nb[0]);
      }
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

// Values per group: the unit of work of a MatVecRowsKernel thread.
constexpr int kGroup = 8;
constexpr int kRowsThreads = 128;

constexpr int kRows = 4;  // rows per block

__device__ __forceinline__ void Unpack(const float4& lo, const float4& hi,
                                       float (&out)[kGroup]) {
  out[0] = lo.x;
  out[1] = lo.y;
  out[2] = lo.z;
  out[3] = lo.w;
  out[4] = hi.x;
  out[5] = hi.y;
  out[6] = hi.z;
  out[7] = hi.w;
}

// Whether a 32-value block of kType keeps its values in nibbles: group t
// of a block is then nibble bytes 4t .. 4t + 3 (values 4t .. 4t + 3 in the
// low nibbles, 16 + 4t .. 16 + 4t + 3 in the high ones).
template <int32_t kType>
constexpr bool kNibbleBlocks =
    kType == kQ4_0 || kType == kQ4_1 || kType == kQ5_0 || kType == kQ5_1;

// The 8 activations that group g of a row of kType multiplies: values
// 8g .. 8g + 7, or for nibble blocks those of the group's nibbles.
template <int32_t kType>
__device__ __forceinline__ void LoadGroupY(const float* y, int64_t g,
                                           float (&out)[kGroup]) {
  const float* p = kNibbleBlocks<kType> ? y + (g / 4) * kQK + (g % 4) * 4
                                        : y + g * kGroup;
  const int second = kNibbleBlocks<kType> ? 16 : 4;
  Unpack(*reinterpret_cast<const float4*>(p),
         *reinterpret_cast<const float4*>(p + second), out);
}

// dot(f.x * level - f.y, y) over a group: the group's values from their
// levels, factor and offset.
__device__ __forceinline__ float AffineDot(const int (&level)[kGroup],
                                           const float (&y)[kGroup],
                                           float2 f) {
  float dot = 0.0f;
  float ysum = 0.0f;
#pragma unroll
  for (int i = 0; i < kGroup; ++i) {
    dot += static_cast<float>(level[i]) * y[i];
    ysum += y[i];
  }
  return f.x * dot - f.y * ysum;
}

// dot(group g of the row at x, y).
template <int32_t kType>
__device__ __forceinline__ float DotGroup(const char* x, int64_t g,
                                          const float (&y)[kGroup]) {
  float w[kGroup];
  if constexpr (kType == kF32) {
    const float4* p = reinterpret_cast<const float4*>(x) + 2 * g;
    Unpack(p[0], p[1], w);
  } else if constexpr (kType == kF16 || kType == kBF16) {
    const uint4 raw = reinterpret_cast<const uint4*>(x)[g];
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f;
      if constexpr (kType == kF16) {
        f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
      } else {
        f = __bfloat1622float2(
            *reinterpret_cast<const __nv_bfloat162*>(&words[i]));
      }
      w[2 * i] = f.x;
      w[2 * i + 1] = f.y;
    }
  } else if constexpr (kType == kQ8_0 || kType == kQ4_0) {
    const int bytes = kType == kQ8_0 ? kQ8Bytes : kQ4Bytes;
    const char* block = x + (g / 4) * bytes;
    const int t = static_cast<int>(g % 4);
    const uint16_t* q = reinterpret_cast<const uint16_t*>(
        block + 2 + (kType == kQ8_0 ? 8 : 4) * t);
    if constexpr (kType == kQ8_0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint16_t pair = q[i];
        w[2 * i] = static_cast<float>(static_cast<int8_t>(pair & 0xff));
        w[2 * i + 1] = static_cast<float>(static_cast<int8_t>(pair >> 8));
      }
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint16_t pair = q[i];
        w[2 * i] = static_cast<float>((pair & 0xf) - 8);
        w[2 * i + 1] = static_cast<float>(((pair >> 8) & 0xf) - 8);
        w[4 + 2 * i] = static_cast<float>(((pair >> 4) & 0xf) - 8);
        w[4 + 2 * i + 1] = static_cast<float>((pair >> 12) - 8);
      }
    }
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kGroup; ++i) dot += w[i] * y[i];
    return dot * BlockScale(block);
  } else if constexpr (kNibbleBlocks<kType>) {
    // Q4_1, Q5_0, Q5_1: group t's nibble bytes as two 16-bit loads, the
    // fifth bits of its values (bits 4t .. 4t + 3 and 16 + 4t .. 16 + 4t +
    // 3 of qh) from the 32-bit word read as two halves.
    const char* block = x + (g / 4) * BlockQuantBytes(kType);
    const int t = static_cast<int>(g % 4);
    const int qs = kType == kQ4_1 ? 4 : kType == kQ5_0 ? 6 : 8;
    const uint16_t* q =
        reinterpret_cast<const uint16_t*>(block + qs + 4 * t);
    int level[kGroup];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint16_t pair = q[i];
      level[2 * i] = pair & 0xf;
      level[2 * i + 1] = (pair >> 8) & 0xf;
      level[4 + 2 * i] = (pair >> 4) & 0xf;
      level[4 + 2 * i + 1] = pair >> 12;
    }
    if constexpr (kType != kQ4_1) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(
          block + (kType == kQ5_0 ? 2 : 4));
      const uint32_t high = h[0] | (static_cast<uint32_t>(h[1]) << 16);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        level[i] |= ((high >> (4 * t + i)) & 1) << 4;
        level[4 + i] |= ((high >> (16 + 4 * t + i)) & 1) << 4;
      }
    }
    return AffineDot(level, y, BlockQuantFactors(kType, block));
  } else {
    // K-quants: 8 values of one sub-block, so one factor and offset.
    const char* block = x + (g / (kQK_K / kGroup)) * KBlockBytes(kType);
    const int j0 = static_cast<int>(g % (kQK_K / kGroup)) * kGroup;
    const float2 f = KFactors(kType, block, j0);
    int level[kGroup];
    if constexpr (kType == kQ6_K || kType == kQ2_K || kType == kQ3_K) {
#pragma unroll
      for (int i = 0; i < kGroup; ++i) level[i] = KLevel(kType, block, j0 + i);
    } else {
      // Q4_K, Q5_K (KLevel's layout): the 8 values' low bits are nibbles of
      // 8 consecutive bytes, Q5_K's fifth bits one bit of 8 more; 8-byte
      // loads (the rows are 8-byte aligned, see RowsKernelFits).
      const int c = j0 / 64;
      const int shift = 4 * ((j0 % 64) / 32);
      const int l = j0 % 32;
      const uint2 q = *reinterpret_cast<const uint2*>(
          block + (kType == kQ4_K ? 16 : 48) + 32 * c + l);
      const uint32_t words[2] = {q.x, q.y};
#pragma unroll
      for (int i = 0; i < kGroup; ++i) {
        level[i] = (words[i / 4] >> (8 * (i % 4) + shift)) & 0x0F;
      }
      if constexpr (kType == kQ5_K) {
        const uint2 h = *reinterpret_cast<const uint2*>(block + 16 + l);
        const uint32_t high[2] = {h.x, h.y};
        const int bit = 2 * c + shift / 4;
#pragma unroll
        for (int i = 0; i < kGroup; ++i) {
          level[i] |= ((high[i / 4] >> (8 * (i % 4) + bit)) & 1) << 4;
        }
      }
    }
    return AffineDot(level, y, f);
  }
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < kGroup; ++i) dot += w[i] * y[i];
  return dot;
}

// Rows kRows * blockIdx.x .. + kRows - 1 of batch blockIdx.y (i2 + ne2 *
// i3 of b): dst[i, 0, i2, i3] = dot(a row (i, i2 / r2, i3 / r3), b row (0,
// i2, i3)).
template <int32_t kType>
__global__ void __launch_bounds__(kRowsThreads)
    MatVecRowsKernel(KTensor dst, KTensor a, KTensor b) {
  const int64_t m = dst.ne[0];
  const int64_t groups = a.ne[0] / kGroup;
  const int64_t i2 = blockIdx.y % b.ne[2];
  const int64_t i3 = blockIdx.y / b.ne[2];
  const int64_t a2 = i2 / (b.ne[2] / a.ne[2]);
  const int64_t a3 = i3 / (b.ne[3] / a.ne[3]);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const float* y = reinterpret_cast<const float*>(RowPtr(b, 0, i2, i3));
  const char* x[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    // Rows past the end repeat the last one; their sums are dropped.
    x[r] = RowPtr(a, row0 + r < m ? row0 + r : m - 1, a2, a3);
  }
  float sum[kRows] = {};
  for (int64_t g = threadIdx.x; g < groups; g += kRowsThreads) {
    float yv[kGroup];
    LoadGroupY<kType>(y, g, yv);
#pragma unroll
    for (int r = 0; r < kRows; ++r) sum[r] += DotGroup<kType>(x[r], g, yv);
  }
  __shared__ float partial[kRows][kRowsThreads / kWarpSize];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float v = WarpSum(sum[r]);
    if (lane == 0) partial[r][warp] = v;
  }
  __syncthreads();
  const int r = threadIdx.x;
  if (r < kRows && row0 + r < m) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kRowsThreads / kWarpSize; ++w) total += partial[r][w];
    *reinterpret_cast<float*>(RowPtr(dst, 0, i2, i3) + (row0 + r) * dst.nb[0]) =
        total;
  }
}

// Whether MatVecRowsKernel computes this product (see the file comment).
bool RowsKernelFits(const KTensor& a, const KTensor& b, int64_t batches) {
  if (b.nb[0] != sizeof(float) || !RowsAligned(b, 16) || batches > 65535) {
    return false;
  }
  switch (a.type) {
    case kF32:
    case kF16:
    case kBF16: {
      const int64_t size = a.type == kF32 ? 4 : 2;
      return a.nb[0] == size && a.ne[0] % kGroup == 0 && RowsAligned(a, 16);
    }
    case kQ8_0:
    case kQ4_0:
    case kQ4_1:
    case kQ5_0:
    case kQ5_1:
    case kQ2_K:
    case kQ3_K:
    case kQ6_K:
      // Blocks hold whole groups; 16-bit loads need even row addresses.
      return RowsAligned(a, 2);
    case kQ4_K:
    case kQ5_K:
      // 8-byte loads inside 144- and 176-byte blocks.
      return RowsAligned(a, 8);
    default:
      return false;
  }
}

template <int32_t kType>
void LaunchRows(const KTensor& dst, const KTensor& a, const KTensor& b,
                int64_t batches, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((dst.ne[0] + kRows - 1) / kRows),
                  static_cast<unsigned>(batches));
  MatVecRowsKernel<kType><<<grid, kRowsThreads, 0, stream>>>(dst, a, b);
}

}  // namespace

cudaError_t MatVec(const KTensor& dst, const KTensor& a, const KTensor& b,
                   cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t batches = dst.ne[2] * dst.ne[3];
  if (RowsKernelFits(a, b, batches)) {
    switch (a.type) {
      case kF32:
        LaunchRows<kF32>(dst, a, b, batches, stream);
        break;
      case kF16:
        LaunchRows<kF16>(dst, a, b, batches, stream);
        break;
      case kBF16:
        LaunchRows<kBF16>(dst, a, b, batches, stream);
        break;
      case kQ8_0:
        LaunchRows<kQ8_0>(dst, a, b, batches, stream);
        break;
      case kQ4_0:
        LaunchRows<kQ4_0>(dst, a, b, batches, stream);
        break;
      case kQ4_1:
        LaunchRows<kQ4_1>(dst, a, b, batches, stream);
        break;
      case kQ5_0:
        LaunchRows<kQ5_0>(dst, a, b, batches, stream);
        break;
      case kQ5_1:
        LaunchRows<kQ5_1>(dst, a, b, batches, stream);
        break;
      case kQ2_K:
        LaunchRows<kQ2_K>(dst, a, b, batches, stream);
        break;
      case kQ3_K:
        LaunchRows<kQ3_K>(dst, a, b, batches, stream);
        break;
      case kQ4_K:
        LaunchRows<kQ4_K>(dst, a, b, batches, stream);
        break;
      case kQ5_K:
        LaunchRows<kQ5_K>(dst, a, b, batches, stream);
        break;
      default:
        LaunchRows<kQ6_K>(dst, a, b, batches, stream);
        break;
    }
    return cudaGetLastError();
  }
  const int64_t outputs = dst.ne[0] * batches;
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
