// Kernels that move values: DUP/CPY/CONT (bit copies, conversions through
// float, quantization), GET_ROWS, SET_ROWS, CONCAT, and the merge of kernel
// error records.

#include <cfloat>

#include "backend/cuda/kernel_common.cuh"

namespace tessera::cuda_kernels {
namespace {

__device__ __forceinline__ void CopyBytes(char* dst, const char* src,
                                          int size) {
  if (size == 4) {
    *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
    return;
  }
  // 2 bytes, or a quantized block (an even size at 2-byte alignment).
  for (int i = 0; i < size; i += 2) {
    *reinterpret_cast<uint16_t*>(dst + i) =
        *reinterpret_cast<const uint16_t*>(src + i);
  }
}

// Address of the source unit (value or block) whose first value has the
// flat, row-major index `flat` in `src` (the copy's source order).
__device__ __forceinline__ const char* FlatUnit(const KTensor& src,
                                                int64_t flat, int unit_values,
                                                int unit_bytes) {
  const int64_t i0 = flat % src.ne[0];
  int64_t r = flat / src.ne[0];
  const int64_t i1 = r % src.ne[1];
  r /= src.ne[1];
  const int64_t i2 = r % src.ne[2];
  const int64_t i3 = r / src.ne[2];
  const int64_t stride = unit_values == 1 ? src.nb[0] : unit_bytes;
  return RowPtr(src, i1, i2, i3) + (i0 / unit_values) * stride;
}

// Value `flat` of `src` in row-major order, as float.
__device__ __forceinline__ float FlatValue(const KTensor& src, int64_t flat) {
  const int64_t i0 = flat % src.ne[0];
  int64_t r = flat / src.ne[0];
  const int64_t i1 = r % src.ne[1];
  r /= src.ne[1];
  const int64_t i2 = r % src.ne[2];
  const int64_t i3 = r / src.ne[2];
  return LoadValue(src, RowPtr(src, i1, i2, i3), i0);
}

// Writes a block's fp16 field at `at` (2-byte aligned).
__device__ __forceinline__ void StoreHalf(char* at, float v) {
  *reinterpret_cast<__half*>(at) = __float2half_rn(v);
}

// Packs the warp's 32 levels (lane j holding level j) into a block's nibbles
// `qs` (value j's low 4 bits in the low nibble of qs[j], value j + 16's in
// the high one) and, for the 5-bit types, the fifth bits into the
// little-endian word at `qh` (bit j from lane j), as graph/block_quant.h
// lays them out. `qh` is null for 4-bit levels.
__device__ __forceinline__ void PackLevels(uint32_t q, char* qs, char* qh,
                                           int lane) {
  const uint32_t high = __shfl_down_sync(0xffffffffu, q, 16);
  const uint32_t fifth = __ballot_sync(0xffffffffu, (q >> 4) & 1u);
  if (lane < 16) qs[lane] = static_cast<char>((q & 0x0Fu) | ((high & 0x0Fu) << 4));
  if (qh != nullptr && lane < 4) qh[lane] = static_cast<char>(fifth >> (8 * lane));
}

// The level trunc(v) clamped to [0, top] (NaN becomes 0).
__device__ __forceinline__ uint32_t Level(float v, float top) {
  return static_cast<uint32_t>(fminf(fmaxf(v, 0.0f), top));
}

// The affine fit of Q4_1 (top 15) and Q5_1 (top 31), as graph/block_quant.cc
// does: d = (max - min) / top, q = trunc((x - min) / d + 0.5); NaNs never
// become the minimum or maximum, and a block without finite bounds keeps
// the host's starting values (FLT_MAX, -FLT_MAX).
__device__ __forceinline__ void QuantizeAffine(float x, float top, char* block,
                                               char* qh, int lane) {
  const float lo = WarpMin(fminf(x, FLT_MAX));
  const float hi = WarpMax(fmaxf(x, -FLT_MAX));
  const float d = __fdiv_rn(__fsub_rn(hi, lo), top);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  const uint32_t q =
      Level(__fadd_rn(__fmul_rn(__fsub_rn(x, lo), id), 0.5f), top);
  if (lane == 0) {
    StoreHalf(block, d);
    StoreHalf(block + 2, lo);
  }
  PackLevels(q, qh != nullptr ? qh + 4 : block + 4, qh, lane);
}

// Quantizes one block of 32 values, lane j holding value j, into `block`
// (warp-collective), as graph/type.h and graph/block_quant.cc do: Q8_0 d =
// max|x| / 127, q = round(x / d); Q4_0 d = m / -8 with m the first value of
// largest magnitude, q = min(15, trunc(x / d + 8.5)); Q5_0 alike with
// d = m / -16 and q = min(31, trunc(x / d + 16.5)); Q4_1 and Q5_1 by their
// affine fit. Products are rounded without fused multiply-add so that
// values on a rounding boundary land as on the host.
__device__ __forceinline__ void QuantizeBlock(int32_t type, float x,
                                              char* block, int lane) {
  if (type == kQ4_1) return QuantizeAffine(x, 15.0f, block, nullptr, lane);
  if (type == kQ5_1) return QuantizeAffine(x, 31.0f, block, block + 4, lane);
  const float ax = fabsf(x);
  if (type == kQ8_0) {
    const float amax = WarpMax(ax);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float q = fminf(fmaxf(roundf(__fmul_rn(x, id)), -127.0f), 127.0f);
    if (lane == 0) *reinterpret_cast<__half*>(block) = __float2half_rn(d);
    block[2 + lane] = static_cast<char>(static_cast<int8_t>(q));
    return;
  }
  // The first lane with the largest magnitude; NaNs never win.
  float best = isnan(ax) ? -1.0f : ax;
  int best_lane = lane;
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int other_lane = __shfl_xor_sync(0xffffffffu, best_lane, offset);
    if (other > best || (other == best && other_lane < best_lane)) {
      best = other;
      best_lane = other_lane;
    }
  }
  // A block with no magnitude above 0 (or only NaNs) has max 0, as on the
  // host, whose strict comparison never picks such a value.
  const float max_value = __shfl_sync(0xffffffffu, x, best_lane);
  const float m = best > 0.0f ? max_value : 0.0f;
  const bool five = type == kQ5_0;
  const float d = __fdiv_rn(m, five ? -16.0f : -8.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  const uint32_t q = Level(__fadd_rn(__fmul_rn(x, id), five ? 16.5f : 8.5f),
                           five ? 31.0f : 15.0f);
  if (lane == 0) StoreHalf(block, d);
  PackLevels(q, block + (five ? 6 : 2), five ? block + 2 : nullptr, lane);
}

__device__ __forceinline__ int UnitBytes(int32_t type) {
  switch (type) {
    case kF16:
    case kBF16:
      return 2;
    case kQ8_0:
      return kQ8Bytes;
    case kQ4_0:
      return kQ4Bytes;
    case kQ4_1:
    case kQ5_0:
    case kQ5_1:
      return BlockQuantBytes(type);
    default:
      return 4;
  }
}

// dst non-quantized: each value from src's value of the same row-major
// index (same coordinates when the shapes are equal), bit copied when the
// types are equal, else through float.
__global__ void CopyValuesKernel(KTensor dst, KTensor src, bool same_shape,
                                 int64_t rows) {
  const int ne1 = static_cast<int>(dst.ne[1]);
  const int ne2 = static_cast<int>(dst.ne[2]);
  const bool bit_copy = dst.type == src.type;
  const int bytes = UnitBytes(dst.type);
  for (int64_t r = FirstRow(); r < rows; r += RowStride()) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    const char* in = same_shape ? RowPtr(src, d.i1, d.i2, d.i3) : nullptr;
    for (int64_t i0 = threadIdx.x; i0 < dst.ne[0]; i0 += blockDim.x) {
      char* o = out + i0 * dst.nb[0];
      const int64_t flat = r * dst.ne[0] + i0;
      if (bit_copy) {
        const char* s = same_shape ? in + i0 * src.nb[0]
                                   : FlatUnit(src, flat, 1, bytes);
        CopyBytes(o, s, bytes);
      } else {
        const float v =
            same_shape ? LoadValue(src, in, i0) : FlatValue(src, flat);
        StoreF(dst.type, v, o);
      }
    }
  }
}

// CopyValuesKernel's conversion of a contiguous F32 src to a contiguous
// dst of F32, F16 or BF16, four values at a time (cuBLAS operands, CONT).
__global__ void ConvertFlatKernel(char* dst, int32_t type, const float4* src,
                                  int64_t n4) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n4; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = src[i];
    if (type == kF32) {
      reinterpret_cast<float4*>(dst)[i] = v;
    } else if (type == kF16) {
      const __half2 lo = __floats2half2_rn(v.x, v.y);
      const __half2 hi = __floats2half2_rn(v.z, v.w);
      reinterpret_cast<uint2*>(dst)[i] =
          make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                     *reinterpret_cast<const uint32_t*>(&hi));
    } else {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
      const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
      reinterpret_cast<uint2*>(dst)[i] =
          make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                     *reinterpret_cast<const uint32_t*>(&hi));
    }
  }
}

// Whether ConvertFlatKernel copies src to dst.
bool ConvertFlatFits(const KTensor& dst, const KTensor& src) {
  if (src.type != kF32 ||
      (dst.type != kF32 && dst.type != kF16 && dst.type != kBF16)) {
    return false;
  }
  const int64_t size = dst.type == kF32 ? 4 : 2;
  return IsContiguous(src, sizeof(float)) && IsContiguous(dst, size) &&
         NumValues(dst) == NumValues(src) && NumValues(dst) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(src.data) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(dst.data) % (4 * size) == 0;
}

// dst and src of one quantized type: block by block in row-major order.
__global__ void CopyBlocksKernel(KTensor dst, KTensor src, int64_t rows) {
  const int ne1 = static_cast<int>(dst.ne[1]);
  const int ne2 = static_cast<int>(dst.ne[2]);
  const int bytes = UnitBytes(dst.type);
  const int64_t blocks = dst.ne[0] / kQK;
  for (int64_t r = FirstRow(); r < rows; r += RowStride()) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
      const int64_t flat = r * dst.ne[0] + b * kQK;
      CopyBytes(out + b * bytes, FlatUnit(src, flat, kQK, bytes), bytes);
    }
  }
}

// dst quantized, src not: one warp per destination block.
__global__ void QuantizeKernel(KTensor dst, KTensor src, int64_t total) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x /
                        kWarpSize;
  const int64_t blocks_per_row = dst.ne[0] / kQK;
  const int bytes = UnitBytes(dst.type);
  for (int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x +
                    threadIdx.x) /
                   kWarpSize;
       w < total; w += warps) {
    const int64_t r = w / blocks_per_row;
    const int64_t b = w % blocks_per_row;
    const RowIndex d =
        RowAt(static_cast<int>(r), static_cast<int>(dst.ne[1]),
              static_cast<int>(dst.ne[2]));
    const float x = FlatValue(src, r * dst.ne[0] + b * kQK + lane);
    QuantizeBlock(dst.type, x, RowPtr(dst, d.i1, d.i2, d.i3) + b * bytes,
                  lane);
  }
}

// The row index that GET_ROWS/SET_ROWS reads at idx[i0, i1, i2] (I32 or
// I64; an I64 beyond int32 becomes -1, out of range).
__device__ __forceinline__ int32_t LoadIndex(const KTensor& idx, int64_t i0,
                                             int64_t i1, int64_t i2) {
  const char* p = idx.data + i0 * idx.nb[0] + i1 * idx.nb[1] + i2 * idx.nb[2];
  if (idx.type == kI64) {
    const int64_t v = *reinterpret_cast<const int64_t*>(p);
    return v < INT32_MIN || v > INT32_MAX ? -1 : static_cast<int32_t>(v);
  }
  return *reinterpret_cast<const int32_t*>(p);
}

// dst row (i1, i2, i3) = a row (idx[i1, i2, i3], i2, i3), as F32 (bit copy
// for I32).
__global__ void GetRowsKernel(KTensor dst, KTensor a, KTensor idx, int32_t op,
                              KernelError* error, int64_t rows) {
  const int ne1 = static_cast<int>(dst.ne[1]);
  const int ne2 = static_cast<int>(dst.ne[2]);
  for (int64_t r = FirstRow(); r < rows; r += RowStride()) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    const int32_t index = LoadIndex(idx, d.i1, d.i2, d.i3);
    if (index < 0 || index >= a.ne[1]) {
      if (threadIdx.x == 0) {
        ReportError(error, kKernelRowIndexOutOfRange, op, index, a.ne[1]);
      }
      continue;
    }
    const char* in = RowPtr(a, index, d.i2, d.i3);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    for (int64_t i0 = threadIdx.x; i0 < dst.ne[0]; i0 += blockDim.x) {
      char* o = out + i0 * dst.nb[0];
      if (a.type == dst.type) {
        CopyBytes(o, in + i0 * a.nb[0], 4);
      } else {
        StoreF(dst.type, LoadValue(a, in, i0), o);
      }
    }
  }
}

// The destination row of b's row (i1, i2, i3), or -1 (reported) when its
// index is out of range.
__device__ __forceinline__ int64_t SetRowsTarget(const KTensor& dst,
                                                 const KTensor& idx, int i1,
                                                 int i2, int i3, int32_t op,
                                                 KernelError* error,
                                                 bool report) {
  const int32_t index = LoadIndex(idx, i1, i2 % idx.ne[1], i3 % idx.ne[2]);
  if (index < 0 || index >= dst.ne[1]) {
    if (report) {
      ReportError(error, kKernelRowIndexOutOfRange, op, index, dst.ne[1]);
    }
    return -1;
  }
  return index;
}

// Non-quantized dst: dst row (idx[...], i2, i3) = b row (i1, i2, i3).
__global__ void SetRowsKernel(KTensor dst, KTensor b, KTensor idx, int32_t op,
                              KernelError* error, int64_t rows) {
  const int ne1 = static_cast<int>(b.ne[1]);
  const int ne2 = static_cast<int>(b.ne[2]);
  for (int64_t r = FirstRow(); r < rows; r += RowStride()) {
    const RowIndex s = RowAt(static_cast<int>(r), ne1, ne2);
    const int64_t target = SetRowsTarget(dst, idx, s.i1, s.i2, s.i3, op, error,
                                         threadIdx.x == 0);
    if (target < 0) continue;
    const char* in = RowPtr(b, s.i1, s.i2, s.i3);
    char* out = RowPtr(dst, target, s.i2, s.i3);
    for (int64_t i0 = threadIdx.x; i0 < b.ne[0]; i0 += blockDim.x) {
      StoreF(dst.type, LoadF(b.type, in + i0 * b.nb[0]), out + i0 * dst.nb[0]);
    }
  }
}

// Quantized dst: one warp per destination block.
__global__ void SetRowsQuantizedKernel(KTensor dst, KTensor b, KTensor idx,
                                       int32_t op, KernelError* error,
                                       int64_t total) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x /
                        kWarpSize;
  const int64_t blocks_per_row = b.ne[0] / kQK;
  const int bytes = UnitBytes(dst.type);
  const int ne1 = static_cast<int>(b.ne[1]);
  const int ne2 = static_cast<int>(b.ne[2]);
  for (int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x +
                    threadIdx.x) /
                   kWarpSize;
       w < total; w += warps) {
    const int64_t r = w / blocks_per_row;
    const int64_t blk = w % blocks_per_row;
    const RowIndex s = RowAt(static_cast<int>(r), ne1, ne2);
    const int64_t target = SetRowsTarget(dst, idx, s.i1, s.i2, s.i3, op, error,
                                         lane == 0 && blk == 0);
    if (target < 0) continue;  // uniform across the warp
    const float x = LoadF(b.type, RowPtr(b, s.i1, s.i2, s.i3) +
                                      (blk * kQK + lane) * b.nb[0]);
    QuantizeBlock(dst.type, x, RowPtr(dst, target, s.i2, s.i3) + blk * bytes,
                  lane);
  }
}

__global__ void ConcatKernel(KTensor dst, KTensor a, KTensor b, int dim,
                             int64_t rows) {
  const int ne1 = static_cast<int>(dst.ne[1]);
  const int ne2 = static_cast<int>(dst.ne[2]);
  const int bytes = UnitBytes(dst.type);
  for (int64_t r = FirstRow(); r < rows; r += RowStride()) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    for (int64_t i0 = threadIdx.x; i0 < dst.ne[0]; i0 += blockDim.x) {
      int64_t idx[4] = {i0, d.i1, d.i2, d.i3};
      const KTensor* from = &a;
      if (idx[dim] >= a.ne[dim]) {
        idx[dim] -= a.ne[dim];
        from = &b;
      }
      const char* in = from->data + idx[0] * from->nb[0] +
                       idx[1] * from->nb[1] + idx[2] * from->nb[2] +
                       idx[3] * from->nb[3];
      CopyBytes(out + i0 * dst.nb[0], in, bytes);
    }
  }
}

__global__ void MergeKernelErrorKernel(KernelError* to,
                                       const KernelError* from) {
  if (to->code == kKernelOk && from->code != kKernelOk) *to = *from;
}

__global__ void WaitHostFlagKernel(const volatile unsigned long long* flag,
                                   unsigned long long target) {
  while (*flag < target) __nanosleep(2000);
}

// Blocks of 256 threads for one warp per item, capped; kernels stride.
unsigned WarpItemBlocks(int64_t items) {
  const int64_t blocks = (items + 7) / 8;
  return static_cast<unsigned>(blocks < (int64_t{1} << 24) ? blocks
                                                           : int64_t{1} << 24);
}

bool SameShape(const KTensor& a, const KTensor& b) {
  return a.ne[0] == b.ne[0] && a.ne[1] == b.ne[1] && a.ne[2] == b.ne[2] &&
         a.ne[3] == b.ne[3];
}

// The quantized types QuantizeBlock writes.
bool HostIsQuantized(int32_t type) {
  return type == kQ8_0 || type == kQ4_0 || IsBlockQuant(type);
}

// Types the kernels read but have no quantizer for (CudaSupportsNode keeps
// writes of them off the device).
bool HostReadOnly(int32_t type) { return IsKQuant(type); }

}  // namespace

cudaError_t Copy(const KTensor& dst, const KTensor& src, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  if (HostReadOnly(dst.type)) return cudaErrorInvalidValue;
  const int64_t rows = NumRows(dst);
  if (ConvertFlatFits(dst, src)) {
    const int64_t n4 = NumValues(dst) / 4;
    int64_t blocks = (n4 + 255) / 256;
    if (blocks > (int64_t{1} << 16)) blocks = int64_t{1} << 16;
    ConvertFlatKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        dst.data, dst.type, reinterpret_cast<const float4*>(src.data), n4);
  } else if (!HostIsQuantized(dst.type)) {
    const RowLaunch l = RowsLaunch(dst.ne[0], rows);
    CopyValuesKernel<<<l.grid, l.block, 0, stream>>>(dst, src,
                                                     SameShape(dst, src), rows);
  } else if (dst.type == src.type) {
    const RowLaunch l = RowsLaunch(dst.ne[0] / kQK, rows);
    CopyBlocksKernel<<<l.grid, l.block, 0, stream>>>(dst, src, rows);
  } else {
    const int64_t total = rows * (dst.ne[0] / kQK);
    QuantizeKernel<<<WarpItemBlocks(total), 256, 0, stream>>>(dst, src, total);
  }
  return cudaGetLastError();
}

cudaError_t GetRows(const KTensor& dst, const KTensor& a, const KTensor& idx,
                    int32_t op, KernelError* error, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(dst);
  const RowLaunch l = RowsLaunch(dst.ne[0], rows);
  GetRowsKernel<<<l.grid, l.block, 0, stream>>>(dst, a, idx, op, error, rows);
  return cudaGetLastError();
}

cudaError_t SetRows(const KTensor& dst, const KTensor& b, const KTensor& idx,
                    int32_t op, KernelError* error, cudaStream_t stream) {
  if (IsEmpty(b)) return cudaSuccess;
  if (HostReadOnly(dst.type)) return cudaErrorInvalidValue;
  const int64_t rows = NumRows(b);
  if (HostIsQuantized(dst.type)) {
    const int64_t total = rows * (b.ne[0] / kQK);
    SetRowsQuantizedKernel<<<WarpItemBlocks(total), 256, 0, stream>>>(
        dst, b, idx, op, error, total);
  } else {
    const RowLaunch l = RowsLaunch(b.ne[0], rows);
    SetRowsKernel<<<l.grid, l.block, 0, stream>>>(dst, b, idx, op, error,
                                                  rows);
  }
  return cudaGetLastError();
}

cudaError_t Concat(const KTensor& dst, const KTensor& a, const KTensor& b,
                   int dim, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(dst);
  const RowLaunch l = RowsLaunch(dst.ne[0], rows);
  ConcatKernel<<<l.grid, l.block, 0, stream>>>(dst, a, b, dim, rows);
  return cudaGetLastError();
}

cudaError_t MergeKernelError(KernelError* to, const KernelError* from,
                             cudaStream_t stream) {
  MergeKernelErrorKernel<<<1, 1, 0, stream>>>(to, from);
  return cudaGetLastError();
}

cudaError_t WaitHostFlag(const uint64_t* flag, uint64_t target,
                         cudaStream_t stream) {
  WaitHostFlagKernel<<<1, 1, 0, stream>>>(
      reinterpret_cast<const volatile unsigned long long*>(flag), target);
  return cudaGetLastError();
}

}  // namespace tessera::cuda_kernels
