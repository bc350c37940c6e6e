// FLASH_ATTN_EXT: softmax(q k^T * scale [softcapped] + slope * mask) v,
// fused, with an online softmax.
//
// A block of kWarps warps takes one output row (query, head, batch) and a
// chunk of its keys. Warp w takes the keys in steps of kKeys consecutive
// ones (j0 = begin + kKeys * w, then kWarps * kKeys further on): it reads
// the mask of the step's keys, computes their kKeys dot products together
// (a lane takes kGroup consecutive values of every kSpan, loaded at once
// where K and V are both F16 or both F32 with contiguous, aligned rows,
// one by one otherwise), reduces them across the warp and updates its
// running maximum, sum and accumulator (the same kGroup values of every
// kSpan of v's rows, in registers) once per step. A step whose keys are all masked is skipped; a masked key of a
// step reads the row of the step's first live key (a cache hit) and weighs
// 0. The warps' parts are merged in shared memory at the end.
//
// Rows are many when prompts are processed: then a block takes all the
// keys of its rows and writes the output (one kernel). Decode has few rows
// (one query times the heads), too few blocks for the GPU, so the keys are
// split ("flash-decoding", SplitFor): grid (row blocks, splits), block
// (r, c) takes the keys [c * chunk, (c + 1) * chunk) of row r and writes
// its partial result to scratch, its maximum M, its sum L = sum exp(s - M)
// and acc_i = sum exp(s - M) v_i; a second kernel merges the partials of
// each row: with M* = max M_c, out_i = sum_c exp(M_c - M*) acc_c,i /
// sum_c exp(M_c - M*) L_c, or 0 when every key is masked.

#include <algorithm>

#include "backend/cuda/kernel_common.cuh"

namespace tessera::cuda_kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
// Keys a warp takes per step.
constexpr int kKeys = 4;
// Values a lane loads at once, and the values a warp covers that way.
constexpr int kGroup = 4;
constexpr int kSpan = kGroup * kWarpSize;

// The key split: enough blocks to fill the GPU (kTargetBlocks, for any
// size of GPU up to a few hundred SMs), at least kMinChunk keys a block
// (the merge costs dv + 2 floats written and read per block), at most
// kMaxSplits blocks a row.
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMinChunk = 64;
constexpr int64_t kMaxSplits = 256;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

__host__ __device__ constexpr int64_t Pad4(int64_t n) {
  return (n + kGroup - 1) / kGroup * kGroup;
}

struct Split {
  int64_t splits;
  int64_t chunk;  // keys of each split
};

Split SplitFor(int64_t rows, int64_t n_kv) {
  const int64_t splits = std::min({CeilDiv(n_kv, kMinChunk),
                                   CeilDiv(kTargetBlocks, rows), kMaxSplits});
  if (splits <= 1) return {1, n_kv};
  // Whole steps of every warp in all splits but the last.
  constexpr int64_t kStep = kWarps * kKeys;
  const int64_t chunk = CeilDiv(CeilDiv(n_kv, splits), kStep) * kStep;
  return {CeilDiv(n_kv, chunk), chunk};
}

// How K and V values are loaded: kGroup at a time when both are F16 or
// both F32, with contiguous rows of a multiple of kGroup values, each row
// aligned to kGroup values (LoadsGroups); one by one otherwise (any type,
// quantized too).
enum class KvLoad { kOneByOne, kF16Groups, kF32Groups };

bool LoadsGroups(const KTensor& t) {
  const int64_t size = t.type == kF16 ? 2 : t.type == kF32 ? 4 : 0;
  if (size == 0 || t.nb[0] != size || t.ne[0] % kGroup != 0) return false;
  const int64_t align = kGroup * size;
  bool aligned = reinterpret_cast<uintptr_t>(t.data) % align == 0;
  for (int i = 1; i < 4; ++i) {
    aligned = aligned && (t.ne[i] <= 1 || t.nb[i] % align == 0);
  }
  return aligned;
}

struct FlashArgs {
  KTensor dst;
  KTensor q;
  KTensor k;
  KTensor v;
  KTensor mask;
  bool has_mask;
  float scale;
  float max_bias;
  float softcap;
  int64_t rows;
  int64_t chunk;   // keys of each block (gridDim.y splits)
  float* partial;  // per (row, split): M, L, acc[dv]; null to write dst
};

KvLoad KvLoadFor(const KTensor& k, const KTensor& v) {
  if (k.type != v.type || !LoadsGroups(k) || !LoadsGroups(v)) {
    return KvLoad::kOneByOne;
  }
  return k.type == kF16 ? KvLoad::kF16Groups : KvLoad::kF32Groups;
}

// Values i0 .. i0 + kGroup - 1 of the row at `row` of `t` (0 past n); for
// the grouped loads i0 is a multiple of kGroup below n.
template <KvLoad kLoad>
__device__ __forceinline__ void LoadGroup(const KTensor& t, const char* row,
                                          int i0, int n, float out[kGroup]) {
  static_assert(kGroup == 4, "the grouped loads take 4 values");
  if constexpr (kLoad == KvLoad::kF16Groups) {
    const uint2 raw = *reinterpret_cast<const uint2*>(row + i0 * 2);
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
    out[0] = lo.x;
    out[1] = lo.y;
    out[2] = hi.x;
    out[3] = hi.y;
  } else if constexpr (kLoad == KvLoad::kF32Groups) {
    const float4 f = *reinterpret_cast<const float4*>(row + i0 * 4);
    out[0] = f.x;
    out[1] = f.y;
    out[2] = f.z;
    out[3] = f.w;
  } else {
#pragma unroll
    for (int e = 0; e < kGroup; ++e) {
      out[e] = i0 + e < n ? LoadValue(t, row, i0 + e) : 0.0f;
    }
  }
}

// Shared memory: q row (d floats, zero-padded to Pad4(d)), then per warp
// its accumulator (dv floats), then per warp its maximum and sum. dv is at
// most kVGroups * kSpan; kLoad is KvLoadFor(k, v) (each way of loading
// has its own instances, which keeps the registers of the grouped ones
// few).
template <int kVGroups, KvLoad kLoad>
__global__ void __launch_bounds__(kThreads) FlashAttnKernel(const FlashArgs a) {
  extern __shared__ float4 fa_shared[];
  const int d = static_cast<int>(a.q.ne[0]);
  const int dv = static_cast<int>(a.v.ne[0]);
  const int d_pad = static_cast<int>(Pad4(d));
  float* q_row = reinterpret_cast<float*>(fa_shared);
  float* acc_all = q_row + d_pad;
  float* stats = acc_all + kWarps * dv;  // [max, sum] per warp
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int n_head = static_cast<int>(a.q.ne[2]);
  const int n_q = static_cast<int>(a.q.ne[1]);
  const int64_t group2 = a.q.ne[2] / a.k.ne[2];
  const int64_t group3 = a.q.ne[3] / a.k.ne[3];
  const int64_t kv_begin = static_cast<int64_t>(blockIdx.y) * a.chunk;
  const int64_t kv_end =
      kv_begin + a.chunk < a.k.ne[1] ? kv_begin + a.chunk : a.k.ne[1];

  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const RowIndex o = RowAt(static_cast<int>(r), n_head, n_q);
    const int head = o.i1;
    const int iq = o.i2;
    const int batch = o.i3;
    const int64_t kh = head / group2;
    const int64_t kb = batch / group3;
    const char* qr = RowPtr(a.q, iq, head, batch);
    const char* mr = a.has_mask ? RowPtr(a.mask, iq, head % a.mask.ne[2],
                                         batch % a.mask.ne[3])
                                : nullptr;
    const char* k_base = RowPtr(a.k, 0, kh, kb);
    const char* v_base = RowPtr(a.v, 0, kh, kb);
    const float slope = AlibiSlope(a.max_bias, head, n_head);

    __syncthreads();  // the previous row's merge has read shared memory
    for (int i = threadIdx.x; i < d_pad; i += blockDim.x) {
      q_row[i] = i < d ? LoadF(a.q.type, qr + i * a.q.nb[0]) : 0.0f;
    }
    __syncthreads();

    float acc[kVGroups * kGroup];
#pragma unroll
    for (int i = 0; i < kVGroups * kGroup; ++i) acc[i] = 0.0f;
    float running_max = -INFINITY;
    float running_sum = 0.0f;
    for (int64_t j0 = kv_begin + warp * kKeys; j0 < kv_end;
         j0 += kWarps * kKeys) {
      // Mask terms; -inf for a masked key or one past the chunk. The
      // values (and so every branch below) are uniform across the warp.
      float mv[kKeys];
      int64_t first = -1;  // the first live key
#pragma unroll
      for (int t = 0; t < kKeys; ++t) {
        const int64_t j = j0 + t;
        mv[t] = j >= kv_end ? -INFINITY
                : a.has_mask
                    ? slope * LoadF(a.mask.type, mr + j * a.mask.nb[0])
                    : 0.0f;
        if (first < 0 && mv[t] != -INFINITY) first = j;
      }
      if (first < 0) continue;
      const char* k_row[kKeys];
      const char* v_row[kKeys];
#pragma unroll
      for (int t = 0; t < kKeys; ++t) {
        const int64_t j = mv[t] == -INFINITY ? first : j0 + t;
        k_row[t] = k_base + j * a.k.nb[1];
        v_row[t] = v_base + j * a.v.nb[1];
      }

      float dot[kKeys];
#pragma unroll
      for (int t = 0; t < kKeys; ++t) dot[t] = 0.0f;
#pragma unroll 1
      for (int i0 = kGroup * lane; i0 < d; i0 += kSpan) {
        const float4 qv = *reinterpret_cast<const float4*>(q_row + i0);
        float kv[kKeys][kGroup];
#pragma unroll
        for (int t = 0; t < kKeys; ++t) {
          LoadGroup<kLoad>(a.k, k_row[t], i0, d, kv[t]);
        }
#pragma unroll
        for (int t = 0; t < kKeys; ++t) {
          dot[t] += qv.x * kv[t][0] + qv.y * kv[t][1] + qv.z * kv[t][2] +
                    qv.w * kv[t][3];
        }
      }
#pragma unroll
      for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
#pragma unroll
        for (int t = 0; t < kKeys; ++t) {
          dot[t] += __shfl_xor_sync(0xffffffffu, dot[t], offset);
        }
      }

      float s[kKeys];
      float step_max = -INFINITY;
#pragma unroll
      for (int t = 0; t < kKeys; ++t) {
        if (mv[t] == -INFINITY) {
          s[t] = -INFINITY;
        } else {
          float x = dot[t] * a.scale;
          if (a.softcap != 0.0f) x = a.softcap * tanhf(x / a.softcap);
          s[t] = x + mv[t];
        }
        step_max = fmaxf(step_max, s[t]);
      }
      if (step_max == -INFINITY) continue;
      const float new_max = fmaxf(running_max, step_max);
      const float keep = expf(running_max - new_max);  // 0 for -inf
      float w[kKeys];
      float w_sum = 0.0f;
#pragma unroll
      for (int t = 0; t < kKeys; ++t) {
        w[t] = expf(s[t] - new_max);  // 0 for a masked key
        w_sum += w[t];
      }
      running_sum = running_sum * keep + w_sum;
      running_max = new_max;
#pragma unroll
      for (int g = 0; g < kVGroups; ++g) {
        const int i0 = g * kSpan + kGroup * lane;
        if (i0 >= dv) continue;
        float vv[kKeys][kGroup];
#pragma unroll
        for (int t = 0; t < kKeys; ++t) {
          LoadGroup<kLoad>(a.v, v_row[t], i0, dv, vv[t]);
        }
#pragma unroll
        for (int e = 0; e < kGroup; ++e) {
          float x = acc[g * kGroup + e] * keep;
#pragma unroll
          for (int t = 0; t < kKeys; ++t) x += w[t] * vv[t][e];
          acc[g * kGroup + e] = x;
        }
      }
    }
#pragma unroll
    for (int g = 0; g < kVGroups; ++g) {
#pragma unroll
      for (int e = 0; e < kGroup; ++e) {
        const int i = g * kSpan + kGroup * lane + e;
        if (i < dv) acc_all[warp * dv + i] = acc[g * kGroup + e];
      }
    }
    if (lane == 0) {
      stats[2 * warp] = running_max;
      stats[2 * warp + 1] = running_sum;
    }
    __syncthreads();

    // Merge: scale each warp's part to the block's maximum.
    float max = -INFINITY;
    for (int w = 0; w < kWarps; ++w) max = fmaxf(max, stats[2 * w]);
    float factor[kWarps];
    float sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      factor[w] = max == -INFINITY ? 0.0f : expf(stats[2 * w] - max);
      sum += factor[w] * stats[2 * w + 1];
    }
    if (a.partial != nullptr) {
      float* p = a.partial + (r * gridDim.y + blockIdx.y) * (dv + 2);
      if (threadIdx.x == 0) {
        p[0] = max;
        p[1] = sum;
      }
      for (int i = threadIdx.x; i < dv; i += blockDim.x) {
        float value = 0.0f;
        for (int w = 0; w < kWarps; ++w) {
          value += factor[w] * acc_all[w * dv + i];
        }
        p[2 + i] = value;
      }
    } else {
      char* out = RowPtr(a.dst, head, iq, batch);
      for (int i = threadIdx.x; i < dv; i += blockDim.x) {
        float value = 0.0f;
        if (sum > 0.0f) {
          for (int w = 0; w < kWarps; ++w) {
            value += factor[w] * acc_all[w * dv + i];
          }
          value /= sum;
        }
        *reinterpret_cast<float*>(out + i * a.dst.nb[0]) = value;
      }
    }
  }
}

// Merges the `splits` partials of each row (FlashArgs::partial) into dst.
__global__ void __launch_bounds__(kThreads)
    FlashAttnMergeKernel(KTensor dst, const float* partial, int64_t rows,
                         int splits, int n_head, int n_q) {
  __shared__ float factor[kMaxSplits];
  const int dv = static_cast<int>(dst.ne[0]);
  const int64_t stride = dv + 2;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* p = partial + r * splits * stride;
    float max = -INFINITY;
    for (int c = 0; c < splits; ++c) max = fmaxf(max, p[c * stride]);
    __syncthreads();  // the previous row has read `factor`
    for (int c = threadIdx.x; c < splits; c += blockDim.x) {
      factor[c] = max == -INFINITY ? 0.0f : expf(p[c * stride] - max);
    }
    __syncthreads();
    float sum = 0.0f;
    for (int c = 0; c < splits; ++c) sum += factor[c] * p[c * stride + 1];
    const RowIndex o = RowAt(static_cast<int>(r), n_head, n_q);
    char* out = RowPtr(dst, o.i1, o.i2, o.i3);
    for (int i = threadIdx.x; i < dv; i += blockDim.x) {
      float value = 0.0f;
      if (sum > 0.0f) {
        for (int c = 0; c < splits; ++c) {
          value += factor[c] * p[c * stride + 2 + i];
        }
        value /= sum;
      }
      *reinterpret_cast<float*>(out + i * dst.nb[0]) = value;
    }
  }
}

template <int kVGroups>
void LaunchFlashAttn(KvLoad load, dim3 grid, size_t shared,
                     cudaStream_t stream, const FlashArgs& args) {
  switch (load) {
    case KvLoad::kF16Groups:
      FlashAttnKernel<kVGroups, KvLoad::kF16Groups>
          <<<grid, kThreads, shared, stream>>>(args);
      return;
    case KvLoad::kF32Groups:
      FlashAttnKernel<kVGroups, KvLoad::kF32Groups>
          <<<grid, kThreads, shared, stream>>>(args);
      return;
    case KvLoad::kOneByOne:
      FlashAttnKernel<kVGroups, KvLoad::kOneByOne>
          <<<grid, kThreads, shared, stream>>>(args);
      return;
  }
}

}  // namespace

size_t FlashAttnScratchBytes(const KTensor& dst, const KTensor& k) {
  if (IsEmpty(dst)) return 0;
  const int64_t rows = NumRows(dst);
  const Split split = SplitFor(rows, k.ne[1]);
  if (split.splits <= 1) return 0;
  return static_cast<size_t>(rows * split.splits * (dst.ne[0] + 2)) *
         sizeof(float);
}

cudaError_t FlashAttn(const KTensor& dst, const KTensor& q, const KTensor& k,
                      const KTensor& v, const KTensor* mask, float scale,
                      float max_bias, float softcap, void* scratch,
                      size_t scratch_bytes, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(dst);
  const Split split = SplitFor(rows, k.ne[1]);
  FlashArgs args;
  args.dst = dst;
  args.q = q;
  args.k = k;
  args.v = v;
  args.mask = mask != nullptr ? *mask : KTensor{};
  args.has_mask = mask != nullptr;
  args.scale = scale;
  args.max_bias = max_bias;
  args.softcap = softcap;
  args.rows = rows;
  args.chunk = split.chunk;
  args.partial = nullptr;
  if (split.splits > 1) {
    if (scratch == nullptr || scratch_bytes < FlashAttnScratchBytes(dst, k)) {
      return cudaErrorInvalidValue;
    }
    args.partial = static_cast<float*>(scratch);
  }
  const dim3 grid(RowBlocks(rows), static_cast<unsigned>(split.splits));
  const size_t shared = static_cast<size_t>(Pad4(q.ne[0]) + kWarps * v.ne[0] +
                                            2 * kWarps) *
                        sizeof(float);
  static_assert(kMaxFlashAttnHead <= 8 * kSpan, "kVGroups up to 8");
  const KvLoad load = KvLoadFor(k, v);
  const int64_t v_groups = CeilDiv(v.ne[0], kSpan);
  if (v_groups <= 1) {
    LaunchFlashAttn<1>(load, grid, shared, stream, args);
  } else if (v_groups <= 2) {
    LaunchFlashAttn<2>(load, grid, shared, stream, args);
  } else if (v_groups <= 4) {
    LaunchFlashAttn<4>(load, grid, shared, stream, args);
  } else {
    LaunchFlashAttn<8>(load, grid, shared, stream, args);
  }
  if (const cudaError_t error = cudaGetLastError();
      error != cudaSuccess || split.splits <= 1) {
    return error;
  }
  FlashAttnMergeKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(
      dst, args.partial, rows, static_cast<int>(split.splits),
      static_cast<int>(q.ne[2]), static_cast<int>(q.ne[1]));
  return cudaGetLastError();
}

}  // namespace tessera::cuda_kernels
