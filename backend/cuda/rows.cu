// Kernels that reduce or reorder whole rows: SUM_ROWS, MEAN, NORM, RMS_NORM,
// ARGMAX, ARGSORT. One block per row (blocks stride over the rows); sums in
// float with a tree reduction.

#include <climits>

#include "backend/cuda/kernel_common.cuh"

namespace tessera::cuda_kernels {
namespace {

__global__ void SumRowsKernel(bool mean, KTensor dst, KTensor a,
                              int64_t rows) {
  const int ne1 = static_cast<int>(a.ne[1]);
  const int ne2 = static_cast<int>(a.ne[2]);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    const char* x = RowPtr(a, d.i1, d.i2, d.i3);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < a.ne[0]; i += blockDim.x) {
      sum += LoadF(a.type, x + i * a.nb[0]);
    }
    sum = BlockSum(sum);
    if (threadIdx.x == 0) {
      if (mean) sum /= static_cast<float>(a.ne[0]);
      StoreF(dst.type, sum, RowPtr(dst, d.i1, d.i2, d.i3));
    }
  }
}

// NORM: (x - mean) / sqrt(var + eps); RMS_NORM: x / sqrt(mean(x^2) + eps).
// Two passes over the row for the statistics (the variance around the
// mean, as the reference computes it), a third to write.
__global__ void NormKernel(bool rms, float eps, KTensor dst, KTensor a,
                           int64_t rows) {
  const int ne1 = static_cast<int>(a.ne[1]);
  const int ne2 = static_cast<int>(a.ne[2]);
  const int64_t n = a.ne[0];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    const char* x = RowPtr(a, d.i1, d.i2, d.i3);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    float mean = 0.0f;
    if (!rms) {
      float sum = 0.0f;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        sum += LoadF(a.type, x + i * a.nb[0]);
      }
      mean = BlockSum(sum) / static_cast<float>(n);
    }
    float sum_sq = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = LoadF(a.type, x + i * a.nb[0]) - mean;
      sum_sq += v * v;
    }
    sum_sq = BlockSum(sum_sq);
    const float inv = 1.0f / sqrtf(sum_sq / static_cast<float>(n) + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = LoadF(a.type, x + i * a.nb[0]);
      StoreF(dst.type, (v - mean) * inv, out + i * dst.nb[0]);
    }
  }
}

// RMS_NORM of rows held in registers (RowsFitRegisters for a and dst):
// one read and one write per value.
template <int kVec>
__global__ void RmsNormRegistersKernel(float eps, KTensor dst, KTensor a,
                                       int64_t rows) {
  const int ne1 = static_cast<int>(a.ne[1]);
  const int ne2 = static_cast<int>(a.ne[2]);
  const int64_t n4 = a.ne[0] / 4;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    float4 v[kVec];
    LoadRow4<kVec>(RowPtr(a, d.i1, d.i2, d.i3), n4, 0.0f, v);
    float sum_sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      sum_sq += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z +
                v[j].w * v[j].w;
    }
    sum_sq = BlockSum(sum_sq);
    const float inv =
        1.0f / sqrtf(sum_sq / static_cast<float>(a.ne[0]) + eps);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      v[j] = make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv,
                         v[j].w * inv);
    }
    StoreRow4<kVec>(RowPtr(dst, d.i1, d.i2, d.i3), n4, v);
  }
}

// The better of two (value, index) candidates: the larger value, the higher
// index on ties. Index -1 stands for "no value yet".
__device__ __forceinline__ void ArgmaxMerge(float& best, int& index, float v,
                                            int i) {
  if (v > best || (v == best && i > index)) {
    best = v;
    index = i;
  }
}

// The last maximum of each row, from -infinity: NaNs never win and a row
// of NaNs gives 0, as in the reference.
__global__ void ArgmaxKernel(KTensor dst, KTensor a) {
  __shared__ float best_values[kWarpSize];
  __shared__ int best_indices[kWarpSize];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  for (int64_t r = blockIdx.x; r < a.ne[1]; r += gridDim.x) {
    const char* x = RowPtr(a, r, 0, 0);
    float best = -INFINITY;
    int index = -1;
    for (int64_t i = threadIdx.x; i < a.ne[0]; i += blockDim.x) {
      const float v = LoadF(a.type, x + i * a.nb[0]);
      if (v >= best) {
        best = v;
        index = static_cast<int>(i);
      }
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const float v = __shfl_xor_sync(0xffffffffu, best, offset);
      const int i = __shfl_xor_sync(0xffffffffu, index, offset);
      ArgmaxMerge(best, index, v, i);
    }
    __syncthreads();  // the previous row's results have been read
    if (lane == 0) {
      best_values[warp] = best;
      best_indices[warp] = index;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < blockDim.x / kWarpSize; ++w) {
        ArgmaxMerge(best, index, best_values[w], best_indices[w]);
      }
      const int32_t result = index < 0 ? 0 : index;
      *reinterpret_cast<int32_t*>(dst.data + r * dst.nb[0]) = result;
    }
  }
}

// Whether index i sorts before index j in a row of n values: padding
// (>= n) last, NaNs after every number, ties by index (a stable sort).
__device__ __forceinline__ bool SortsBefore(const float* values, int n,
                                            bool descending, int i, int j) {
  if (i >= n) return false;
  if (j >= n) return true;
  const float u = values[i];
  const float v = values[j];
  const bool u_nan = isnan(u);
  const bool v_nan = isnan(v);
  if (u_nan || v_nan) return u_nan == v_nan ? i < j : v_nan;
  if (u == v) return i < j;
  return descending ? u > v : u < v;
}

// Bitonic sort of the indices of one row in shared memory: `padded`
// (a power of two >= ne0) indices, then the row's ne0 values.
__global__ void ArgsortKernel(bool descending, int padded, KTensor dst,
                              KTensor a, int64_t rows) {
  extern __shared__ int sort_shared[];
  int* idx = sort_shared;
  float* values = reinterpret_cast<float*>(sort_shared + padded);
  const int n = static_cast<int>(a.ne[0]);
  const int ne1 = static_cast<int>(a.ne[1]);
  const int ne2 = static_cast<int>(a.ne[2]);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    const char* x = RowPtr(a, d.i1, d.i2, d.i3);
    __syncthreads();  // the previous row is written out
    for (int i = threadIdx.x; i < padded; i += blockDim.x) {
      idx[i] = i;
      if (i < n) values[i] = LoadF(a.type, x + i * a.nb[0]);
    }
    __syncthreads();
    for (int k = 2; k <= padded; k *= 2) {
      for (int j = k / 2; j > 0; j /= 2) {
        for (int i = threadIdx.x; i < padded; i += blockDim.x) {
          const int partner = i ^ j;
          if (partner <= i) continue;
          const int p = idx[i];
          const int q = idx[partner];
          const bool ascending_pair = (i & k) == 0;
          const bool swap =
              ascending_pair ? SortsBefore(values, n, descending, q, p)
                             : SortsBefore(values, n, descending, p, q);
          if (swap) {
            idx[i] = q;
            idx[partner] = p;
          }
        }
        __syncthreads();
      }
    }
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      *reinterpret_cast<int32_t*>(out + i * dst.nb[0]) = idx[i];
    }
  }
}

}  // namespace

cudaError_t SumRows(bool mean, const KTensor& dst, const KTensor& a,
                    cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(a);
  SumRowsKernel<<<RowBlocks(rows), ReductionThreads(a.ne[0]), 0, stream>>>(
      mean, dst, a, rows);
  return cudaGetLastError();
}

cudaError_t Norm(bool rms, float eps, const KTensor& dst, const KTensor& a,
                 cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(a);
  const RegisterRows shape = RegisterRowsFor(a.ne[0]);
  if (rms && shape.vec != 0 && RowsFitRegisters(a) && RowsFitRegisters(dst)) {
    WithRegisterVec(shape.vec, [&](auto vec) {
      RmsNormRegistersKernel<decltype(vec)::value>
          <<<RowBlocks(rows), shape.threads, 0, stream>>>(eps, dst, a, rows);
    });
    return cudaGetLastError();
  }
  NormKernel<<<RowBlocks(rows), ReductionThreads(a.ne[0]), 0, stream>>>(
      rms, eps, dst, a, rows);
  return cudaGetLastError();
}

cudaError_t Argmax(const KTensor& dst, const KTensor& a, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  ArgmaxKernel<<<RowBlocks(a.ne[1]), ReductionThreads(a.ne[0]), 0, stream>>>(
      dst, a);
  return cudaGetLastError();
}

cudaError_t Argsort(bool descending, const KTensor& dst, const KTensor& a,
                    cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  int padded = 1;
  while (padded < a.ne[0]) padded *= 2;
  int threads = padded / 2;
  if (threads < kWarpSize) threads = kWarpSize;
  if (threads > 1024) threads = 1024;
  const size_t shared = static_cast<size_t>(padded) * sizeof(int) +
                        static_cast<size_t>(a.ne[0]) * sizeof(float);
  cudaError_t error = cudaFuncSetAttribute(
      ArgsortKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      static_cast<int>(shared));
  if (error != cudaSuccess) return error;
  const int64_t rows = NumRows(a);
  ArgsortKernel<<<RowBlocks(rows), threads, shared, stream>>>(
      descending, padded, dst, a, rows);
  return cudaGetLastError();
}

}  // namespace tessera::cuda_kernels
