// FLASH_ATTN_EXT: softmax(q k^T * scale [softcapped] + slope * mask) v,
// fused, with an online softmax. One block of kWarps warps per output row
// (query, head, batch); warp w takes the keys j = w, w + kWarps, ... and
// keeps its own running maximum, sum and accumulator; the warps' partial
// results are merged at the end.

#include "backend/cuda/kernel_common.cuh"

namespace tessera::cuda_kernels {
namespace {

constexpr int kWarps = 4;

// Shared memory: q row (d floats), then per warp an accumulator (dv floats),
// then per warp its maximum and sum.
__global__ void FlashAttnKernel(KTensor dst, KTensor q, KTensor k, KTensor v,
                                KTensor mask, bool has_mask, float scale,
                                float max_bias, float softcap, int64_t rows) {
  extern __shared__ float fa_shared[];
  const int d = static_cast<int>(q.ne[0]);
  const int dv = static_cast<int>(v.ne[0]);
  float* q_row = fa_shared;
  float* acc_all = q_row + d;
  float* stats = acc_all + kWarps * dv;  // [max, sum] per warp
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  float* acc = acc_all + warp * dv;
  const int n_head = static_cast<int>(q.ne[2]);
  const int n_q = static_cast<int>(q.ne[1]);
  const int64_t n_kv = k.ne[1];
  const int64_t group2 = q.ne[2] / k.ne[2];
  const int64_t group3 = q.ne[3] / k.ne[3];

  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const RowIndex o = RowAt(static_cast<int>(r), n_head, n_q);
    const int head = o.i1;
    const int iq = o.i2;
    const int batch = o.i3;
    const int64_t kh = head / group2;
    const int64_t kb = batch / group3;
    const char* qr = RowPtr(q, iq, head, batch);
    const char* mr = has_mask ? RowPtr(mask, iq, head % mask.ne[2],
                                       batch % mask.ne[3])
                              : nullptr;
    const float slope = AlibiSlope(max_bias, head, n_head);

    __syncthreads();  // the previous row's merge has read shared memory
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      q_row[i] = LoadF(q.type, qr + i * q.nb[0]);
    }
    for (int i = lane; i < dv; i += kWarpSize) acc[i] = 0.0f;
    __syncthreads();

    float running_max = -INFINITY;
    float running_sum = 0.0f;
    for (int64_t j = warp; j < n_kv; j += kWarps) {
      const float mv =
          has_mask ? slope * LoadF(mask.type, mr + j * mask.nb[0]) : 0.0f;
      if (mv == -INFINITY) continue;  // uniform across the warp
      const char* kr = RowPtr(k, j, kh, kb);
      float dot = 0.0f;
      for (int i = lane; i < d; i += kWarpSize) {
        dot += q_row[i] * LoadF(k.type, kr + i * k.nb[0]);
      }
      dot = WarpSum(dot);
      float s = dot * scale;
      if (softcap != 0.0f) s = softcap * tanhf(s / softcap);
      s += mv;
      const float new_max = fmaxf(running_max, s);
      const float keep = expf(running_max - new_max);  // 0 for -inf
      const float w = expf(s - new_max);
      running_sum = running_sum * keep + w;
      running_max = new_max;
      const char* vr = RowPtr(v, j, kh, kb);
      for (int i = lane; i < dv; i += kWarpSize) {
        acc[i] = acc[i] * keep + w * LoadF(v.type, vr + i * v.nb[0]);
      }
    }
    if (lane == 0) {
      stats[2 * warp] = running_max;
      stats[2 * warp + 1] = running_sum;
    }
    __syncthreads();

    // Merge: scale each warp's part to the overall maximum.
    float max = -INFINITY;
    for (int w = 0; w < kWarps; ++w) max = fmaxf(max, stats[2 * w]);
    float factor[kWarps];
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      factor[w] = max == -INFINITY ? 0.0f : expf(stats[2 * w] - max);
      sum += factor[w] * stats[2 * w + 1];
    }
    char* out = RowPtr(dst, head, iq, batch);
    for (int i = threadIdx.x; i < dv; i += blockDim.x) {
      float value = 0.0f;
      if (sum > 0.0f) {
        for (int w = 0; w < kWarps; ++w) {
          value += factor[w] * acc_all[w * dv + i];
        }
        value /= sum;
      }
      *reinterpret_cast<float*>(out + i * dst.nb[0]) = value;
    }
  }
}

}  // namespace

cudaError_t FlashAttn(const KTensor& dst, const KTensor& q, const KTensor& k,
                      const KTensor& v, const KTensor* mask, float scale,
                      float max_bias, float softcap, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(dst);
  const size_t shared =
      (static_cast<size_t>(q.ne[0]) + kWarps * static_cast<size_t>(v.ne[0]) +
       2 * kWarps) *
      sizeof(float);
  FlashAttnKernel<<<RowBlocks(rows), kWarps * kWarpSize, shared, stream>>>(
      dst, q, k, v, mask != nullptr ? *mask : KTensor{}, mask != nullptr,
      scale, max_bias, softcap, rows);
  return cudaGetLastError();
}

}  // namespace tessera::cuda_kernels
