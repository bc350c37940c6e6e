// Matrix-vector products for MUL_MAT with one column per batch. Quantized
// weights are dequantized on the fly, so the weights are read once and
// never expanded in memory.
//
// Q8_0, Q4_0 and Q4_K weights (the types of most GGUF files' large
// matrices), with activations contiguous, run MatVecQ8Kernel: a first
// kernel rounds each 32 activations to 8-bit integers with one F32 scale
// (d = amax / 127, as ggml's Q8_1 activation blocks), and the product takes
// 32 values of a row per thread in integer dot products (dp4a), scaled
// once per block. As ggml's products do, this rounds the activations:
// each moves by at most d / 2. The 8-bit activations cost a quarter of the
// F32 ones' loads, which made these products 1.35-1.8x faster on an H200.
//
// The other usual cases (activations contiguous and 16-byte aligned; rows
// of F32, F16 or BF16 16-byte aligned and a multiple of 8 values, or of a
// quantized type) run MatVecRowsKernel: a few weight rows per block, each
// thread taking groups of 8 values of all of them, so that the loads of
// one row's group are wide and neighbouring threads' are adjacent (the
// block streams the rows' bytes), and one load of 8 activations serves
// every row; activations stay F32. Any other layout runs MatVecKernel: one
// warp per output value, each lane taking whole 32-value blocks, 8 values
// of every K-quant super-block, or single values.

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

// Rows per MatVecRowsKernel block: 2 for the 32-value blocks (more blocks
// of fewer rows kept an H200's memory busier: 1.2-1.5x faster), 4 for the
// other types.
template <int32_t kType>
constexpr int kRows =
    kType == kQ8_0 || kType == kQ4_0 || kNibbleBlocks<kType> ? 2 : 4;

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

// Each thread's partial sums of kR rows: the block's totals go to
// dst[row0 + r, 0, i2, i3] for the rows below m. blockDim.x is
// kRowsThreads.
template <int kR>
__device__ __forceinline__ void StoreRowSums(const float (&sum)[kR],
                                             const KTensor& dst, int64_t row0,
                                             int64_t i2, int64_t i3) {
  __shared__ float partial[kR][kRowsThreads / kWarpSize];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float v = WarpSum(sum[r]);
    if (lane == 0) partial[r][warp] = v;
  }
  __syncthreads();
  const int r = threadIdx.x;
  if (r < kR && row0 + r < dst.ne[0]) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kRowsThreads / kWarpSize; ++w) total += partial[r][w];
    *reinterpret_cast<float*>(RowPtr(dst, 0, i2, i3) + (row0 + r) * dst.nb[0]) =
        total;
  }
}

// The rows block (blockIdx.x, blockIdx.y) multiplies: kR from
// kR * blockIdx.x of the a batch that b batch blockIdx.y (i2 + ne2 * i3)
// broadcasts from. Rows past the end repeat the last one; their sums are
// dropped.
template <int kR>
__device__ __forceinline__ void BlockRows(const KTensor& a, const KTensor& b,
                                          int64_t m, int64_t& row0,
                                          int64_t& i2, int64_t& i3,
                                          const char* (&x)[kR]) {
  i2 = blockIdx.y % b.ne[2];
  i3 = blockIdx.y / b.ne[2];
  const int64_t a2 = i2 / (b.ne[2] / a.ne[2]);
  const int64_t a3 = i3 / (b.ne[3] / a.ne[3]);
  row0 = static_cast<int64_t>(blockIdx.x) * kR;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    x[r] = RowPtr(a, row0 + r < m ? row0 + r : m - 1, a2, a3);
  }
}

// Rows kRows * blockIdx.x .. + kRows - 1 of batch blockIdx.y:
// dst[i, 0, i2, i3] = dot(a row (i, i2 / r2, i3 / r3), b row (0, i2, i3)).
template <int32_t kType>
__global__ void __launch_bounds__(kRowsThreads)
    MatVecRowsKernel(KTensor dst, KTensor a, KTensor b) {
  constexpr int kR = kRows<kType>;
  const int64_t groups = a.ne[0] / kGroup;
  int64_t row0, i2, i3;
  const char* x[kR];
  BlockRows<kR>(a, b, dst.ne[0], row0, i2, i3, x);
  const float* y = reinterpret_cast<const float*>(RowPtr(b, 0, i2, i3));
  float sum[kR] = {};
  for (int64_t g = threadIdx.x; g < groups; g += kRowsThreads) {
    float yv[kGroup];
    LoadGroupY<kType>(y, g, yv);
#pragma unroll
    for (int r = 0; r < kR; ++r) sum[r] += DotGroup<kType>(x[r], g, yv);
  }
  StoreRowSums<kR>(sum, dst, row0, i2, i3);
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
  constexpr int kR = kRows<kType>;
  const dim3 grid(static_cast<unsigned>((dst.ne[0] + kR - 1) / kR),
                  static_cast<unsigned>(batches));
  MatVecRowsKernel<kType><<<grid, kRowsThreads, 0, stream>>>(dst, a, b);
}

// The activations of every batch rounded to 8 bits per 32 values: batch
// i's k integers at q + i * k, and for its 32-value block j the scale d
// and d * (the sum of the block's integers) at ds[i * k / 32 + j].
struct Q8Activations {
  const int8_t* q;
  const float2* ds;
};

// Bytes of ds for `batches` rows of k activations; q follows, 16-byte
// aligned (k is a multiple of 32, so each batch's integers stay aligned).
size_t Q8DsBytes(int64_t k, int64_t batches) {
  const size_t bytes =
      static_cast<size_t>(batches * (k / kQK)) * sizeof(float2);
  return (bytes + 15) / 16 * 16;
}

bool TakesQ8Activations(int32_t type) {
  return type == kQ8_0 || type == kQ4_0 || type == kQ4_K;
}

// One warp per 32-value block of b (rows of k contiguous F32 values, one
// per batch): d = amax / 127, integers round(x / d).
__global__ void QuantizeActivationsKernel(KTensor b, int8_t* q, float2* ds,
                                          int64_t blocks) {
  const int64_t block =
      static_cast<int64_t>(blockIdx.x) * (kRowsThreads / kWarpSize) +
      threadIdx.x / kWarpSize;
  if (block >= blocks) return;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t per_row = b.ne[0] / kQK;
  const int64_t batch = block / per_row;
  const float* y = reinterpret_cast<const float*>(
      RowPtr(b, 0, batch % b.ne[2], batch / b.ne[2]));
  const float v = y[(block % per_row) * kQK + lane];
  const float amax = WarpMax(fabsf(v));
  const float d = amax / 127.0f;
  const int level = amax > 0.0f ? __float2int_rn(v / d) : 0;
  q[block * kQK + lane] = static_cast<int8_t>(level);
  const int sum = __reduce_add_sync(0xffffffffu, level);
  if (lane == 0) ds[block] = make_float2(d, d * static_cast<float>(sum));
}

// Four bytes at 2-byte aligned `p`.
__device__ __forceinline__ int LoadInt(const uint16_t* p) {
  return static_cast<int>(p[0] | (static_cast<uint32_t>(p[1]) << 16));
}

__device__ __forceinline__ void Unpack(const int4& v, int* out) {
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}

constexpr int kNibbles = 0x0F0F0F0F;
constexpr int kOnes = 0x01010101;

// The 6-bit scale and min of sub-block s (0..7) of a Q4_K super-block
// from its 12 packed bytes at p.
__device__ __forceinline__ int2 Q4KScaleMin(const uint8_t* p, int s) {
  if (s < 4) return make_int2(p[s] & 63, p[s + 4] & 63);
  return make_int2((p[s + 4] & 0x0F) | ((p[s - 4] >> 6) << 4),
                   (p[s + 4] >> 4) | ((p[s] >> 6) << 4));
}

// dot(32 values of the row at x, the batch's rounded activations): unit u
// is block u of Q8_0 and Q4_0 rows; of Q4_K rows, 16 bytes of super-block
// u / 8's nibbles (chunk c = u % 8 / 2, half p = u % 2), which hold 16
// values of sub-block 2c (low nibbles) and 16 of sub-block 2c + 1.
template <int32_t kType>
__device__ __forceinline__ float DotUnit(const char* x, int64_t u,
                                         const int8_t* yq, const float2* yds) {
  if constexpr (kType == kQ8_0 || kType == kQ4_0) {
    int y[8];
    const int4* yv = reinterpret_cast<const int4*>(yq + u * kQK);
    Unpack(yv[0], y);
    Unpack(yv[1], y + 4);
    const float2 ds = yds[u];
    const char* block = x + u * (kType == kQ8_0 ? kQ8Bytes : kQ4Bytes);
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(block + 2);
    int dot = 0;
    if constexpr (kType == kQ8_0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) dot = __dp4a(LoadInt(qs + 2 * i), y[i], dot);
      return BlockScale(block) * ds.x * static_cast<float>(dot);
    } else {
      // Byte i holds value i (low nibble) and i + 16 (high); levels less 8,
      // so the block's sum of integers times 8 is taken off.
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int w = LoadInt(qs + 2 * i);
        dot = __dp4a(w & kNibbles, y[i], dot);
        dot = __dp4a((w >> 4) & kNibbles, y[4 + i], dot);
      }
      return BlockScale(block) *
             (ds.x * static_cast<float>(dot) - 8.0f * ds.y);
    }
  } else {
    const int64_t super = u / 8;
    const int c = static_cast<int>(u % 8) / 2;
    const int p = static_cast<int>(u % 2);
    const int8_t* yb = yq + super * kQK_K + 64 * c + 16 * p;
    int lo[4];
    int hi[4];
    Unpack(*reinterpret_cast<const int4*>(yb), lo);
    Unpack(*reinterpret_cast<const int4*>(yb + 32), hi);
    const float d_lo = yds[super * 8 + 2 * c].x;
    const float d_hi = yds[super * 8 + 2 * c + 1].x;
    const char* block = x + super * KBlockBytes(kQ4_K);
    int w[4];
    Unpack(*reinterpret_cast<const int4*>(block + 16 + 32 * c + 16 * p), w);
    int dot_lo = 0;
    int dot_hi = 0;
    int sum_lo = 0;
    int sum_hi = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      dot_lo = __dp4a(w[i] & kNibbles, lo[i], dot_lo);
      dot_hi = __dp4a((w[i] >> 4) & kNibbles, hi[i], dot_hi);
      sum_lo = __dp4a(kOnes, lo[i], sum_lo);
      sum_hi = __dp4a(kOnes, hi[i], sum_hi);
    }
    const uint8_t* packed = reinterpret_cast<const uint8_t*>(block + 4);
    const int2 sm_lo = Q4KScaleMin(packed, 2 * c);
    const int2 sm_hi = Q4KScaleMin(packed, 2 * c + 1);
    // value = d * scale * level - dmin * min
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(block));
    return dm.x * (d_lo * static_cast<float>(sm_lo.x * dot_lo) +
                   d_hi * static_cast<float>(sm_hi.x * dot_hi)) -
           dm.y * (d_lo * static_cast<float>(sm_lo.y * sum_lo) +
                   d_hi * static_cast<float>(sm_hi.y * sum_hi));
  }
}

// Rows per block and unrolling of MatVecQ8Kernel's loop: the fastest of
// 1, 2 or 4 rows and unrolling by 1, 2 or 4 on an H200.
template <int32_t kType>
constexpr int kQ8Rows = kType == kQ4_K ? 1 : 2;
template <int32_t kType>
constexpr int kQ8Unroll = kType == kQ4_0 ? 2 : 1;

// As MatVecRowsKernel, with b's activations rounded in `act`.
template <int32_t kType>
__global__ void __launch_bounds__(kRowsThreads)
    MatVecQ8Kernel(KTensor dst, KTensor a, KTensor b, Q8Activations act) {
  constexpr int kR = kQ8Rows<kType>;
  const int64_t k = a.ne[0];
  const int64_t units = k / kQK;
  int64_t row0, i2, i3;
  const char* x[kR];
  BlockRows<kR>(a, b, dst.ne[0], row0, i2, i3, x);
  const int8_t* yq = act.q + blockIdx.y * k;
  const float2* yds = act.ds + blockIdx.y * units;
  float sum[kR] = {};
#pragma unroll kQ8Unroll<kType>
  for (int64_t u = threadIdx.x; u < units; u += kRowsThreads) {
#pragma unroll
    for (int r = 0; r < kR; ++r) sum[r] += DotUnit<kType>(x[r], u, yq, yds);
  }
  StoreRowSums<kR>(sum, dst, row0, i2, i3);
}

// Whether MatVecQ8Kernel computes this product: contiguous activations,
// weight rows aligned for 16-bit (Q8_0, Q4_0) or 16-byte (Q4_K) loads.
bool Q8KernelFits(const KTensor& a, const KTensor& b, int64_t batches) {
  if (!TakesQ8Activations(a.type) || b.nb[0] != sizeof(float) ||
      !RowsAligned(b, sizeof(float)) || batches > 65535) {
    return false;
  }
  return RowsAligned(a, a.type == kQ4_K ? 16 : 2);
}

template <int32_t kType>
void LaunchQ8(const KTensor& dst, const KTensor& a, const KTensor& b,
              int64_t batches, char* scratch, cudaStream_t stream) {
  const int64_t k = a.ne[0];
  float2* ds = reinterpret_cast<float2*>(scratch);
  int8_t* q = reinterpret_cast<int8_t*>(scratch + Q8DsBytes(k, batches));
  const int64_t blocks = batches * (k / kQK);
  constexpr int kWarps = kRowsThreads / kWarpSize;
  const unsigned quantize_grid =
      static_cast<unsigned>((blocks + kWarps - 1) / kWarps);
  QuantizeActivationsKernel<<<quantize_grid, kRowsThreads, 0, stream>>>(
      b, q, ds, blocks);
  constexpr int kR = kQ8Rows<kType>;
  const dim3 grid(static_cast<unsigned>((dst.ne[0] + kR - 1) / kR),
                  static_cast<unsigned>(batches));
  MatVecQ8Kernel<kType>
      <<<grid, kRowsThreads, 0, stream>>>(dst, a, b, Q8Activations{q, ds});
}

}  // namespace

size_t MatVecScratchBytes(const KTensor& a, const KTensor& b) {
  if (!TakesQ8Activations(a.type)) return 0;
  const int64_t batches = b.ne[2] * b.ne[3];
  return Q8DsBytes(a.ne[0], batches) + static_cast<size_t>(batches * a.ne[0]);
}

cudaError_t MatVec(const KTensor& dst, const KTensor& a, const KTensor& b,
                   void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t batches = dst.ne[2] * dst.ne[3];
  if (Q8KernelFits(a, b, batches)) {
    if (scratch == nullptr || scratch_bytes < MatVecScratchBytes(a, b)) {
      return cudaErrorInvalidValue;
    }
    char* s = static_cast<char*>(scratch);
    switch (a.type) {
      case kQ8_0:
        LaunchQ8<kQ8_0>(dst, a, b, batches, s, stream);
        break;
      case kQ4_0:
        LaunchQ8<kQ4_0>(dst, a, b, batches, s, stream);
        break;
      default:
        LaunchQ8<kQ4_K>(dst, a, b, batches, s, stream);
        break;
    }
    return cudaGetLastError();
  }
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
