// SOFT_MAX and ROPE kernels. Each row is read fully (SOFT_MAX) or each value
// pair is read (ROPE) before it is written by the same thread, so dst may
// alias a.

#include "backend/cuda/kernel_common.cuh"

namespace tessera::cuda_kernels {
namespace {

// Rows up to this many values (44 KiB) stay in shared memory between
// passes, within the 48 KiB a block gets without opting in; longer rows use
// dst as the scratch.
constexpr int64_t kSoftMaxCacheValues = 11264;

// softmax(a * scale + slope * mask) per row, one block per row:
//  1. w_i = a_i * scale + slope * mask_i (mask row (i1, i2 % m2, i3 % m3)),
//     kept in the cache, and the block's maximum;
//  2. e_i = exp(w_i - max) and their sum;
//  3. dst_i = e_i / sum.
template <bool kCache>
__global__ void SoftMaxKernel(KTensor dst, KTensor a, KTensor mask,
                              bool has_mask, float scale, float max_bias,
                              int64_t rows) {
  extern __shared__ float row_cache[];
  const int ne1 = static_cast<int>(a.ne[1]);
  const int ne2 = static_cast<int>(a.ne[2]);
  const int64_t n = a.ne[0];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    const char* x = RowPtr(a, d.i1, d.i2, d.i3);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    const char* m =
        has_mask ? RowPtr(mask, d.i1, d.i2 % mask.ne[2], d.i3 % mask.ne[3])
                 : nullptr;
    const float slope = AlibiSlope(max_bias, d.i2, static_cast<int>(a.ne[2]));
    auto at = [&](int64_t i) -> float& {
      if constexpr (kCache) return row_cache[i];
      return *reinterpret_cast<float*>(out + i * dst.nb[0]);
    };

    float max = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float w = LoadF(a.type, x + i * a.nb[0]) * scale;
      if (has_mask) w += slope * LoadF(mask.type, m + i * mask.nb[0]);
      at(i) = w;
      max = fmaxf(max, w);
    }
    max = BlockMax(max);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float e = expf(at(i) - max);
      at(i) = e;
      sum += e;
    }
    const float inv = 1.0f / BlockSum(sum);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = at(i) * inv;
      *reinterpret_cast<float*>(out + i * dst.nb[0]) = v;
    }
  }
}

// SoftMaxKernel's three steps on rows held in registers (RowsFitRegisters
// for a and dst): one read of a (and the mask) and one write per value.
// Values past the row's end are -infinity, so they add nothing.
template <int kVec>
__global__ void SoftMaxRegistersKernel(KTensor dst, KTensor a, KTensor mask,
                                       bool has_mask, float scale,
                                       float max_bias, int64_t rows) {
  const int ne1 = static_cast<int>(a.ne[1]);
  const int ne2 = static_cast<int>(a.ne[2]);
  const int64_t n4 = a.ne[0] / 4;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    float4 v[kVec];
    LoadRow4<kVec>(RowPtr(a, d.i1, d.i2, d.i3), n4, -INFINITY, v);
    const char* m =
        has_mask ? RowPtr(mask, d.i1, d.i2 % mask.ne[2], d.i3 % mask.ne[3])
                 : nullptr;
    const float slope = AlibiSlope(max_bias, d.i2, static_cast<int>(a.ne[2]));
    float max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int64_t i = 4 * (threadIdx.x + static_cast<int64_t>(j) * blockDim.x);
      float* w = reinterpret_cast<float*>(&v[j]);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (i >= a.ne[0]) break;
        w[c] *= scale;
        if (has_mask) w[c] += slope * LoadF(mask.type, m + (i + c) * mask.nb[0]);
        max = fmaxf(max, w[c]);
      }
    }
    max = BlockMax(max);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      float* w = reinterpret_cast<float*>(&v[j]);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        w[c] = expf(w[c] - max);
        sum += w[c];
      }
    }
    const float inv = 1.0f / BlockSum(sum);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      v[j] = make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv,
                         v[j].w * inv);
    }
    StoreRow4<kVec>(RowPtr(dst, d.i1, d.i2, d.i3), n4, v);
  }
}

// One thread per rotated pair and per value past n_dims (copied), over a
// RowsLaunch of dst's rows. Angles follow ggml's rope_yarn (see
// graph/reference_attention.cc), in float.
__global__ void RopeKernel(KTensor dst, KTensor a, KTensor pos, RopeArgs args,
                           int64_t rows) {
  const int ne1 = static_cast<int>(a.ne[1]);
  const int ne2 = static_cast<int>(a.ne[2]);
  const int half = args.n_dims / 2;
  const int64_t items = half + (a.ne[0] - args.n_dims);
  for (int64_t r = FirstRow(); r < rows; r += RowStride()) {
    const RowIndex d = RowAt(static_cast<int>(r), ne1, ne2);
    const char* x = RowPtr(a, d.i1, d.i2, d.i3);
    char* out = RowPtr(dst, d.i1, d.i2, d.i3);
    const float p = static_cast<float>(
        *reinterpret_cast<const int32_t*>(pos.data + d.i2 * pos.nb[0]));
    for (int64_t item = threadIdx.x; item < items; item += blockDim.x) {
      if (item >= half) {
        const int64_t j = args.n_dims + (item - half);
        StoreF(dst.type, LoadF(a.type, x + j * a.nb[0]), out + j * dst.nb[0]);
        continue;
      }
      const int i = static_cast<int>(item);
      const float factor =
          args.freq_factors != nullptr
              ? *reinterpret_cast<const float*>(args.freq_factors +
                                                i * args.freq_factors_nb0)
              : 1.0f;
      const float theta_extrap =
          p * powf(args.freq_base, -2.0f * i / static_cast<float>(args.n_dims)) /
          factor;
      const float theta_interp = args.freq_scale * theta_extrap;
      float theta = theta_interp;
      float mscale = args.attn_factor;
      if (args.ext_factor != 0.0f) {
        const float y = (i - args.corr_low) /
                        fmaxf(0.001f, args.corr_high - args.corr_low);
        const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) *
                           args.ext_factor;
        theta = theta_interp * (1.0f - ramp) + theta_extrap * ramp;
        mscale *= 1.0f + 0.1f * logf(1.0f / args.freq_scale);
      }
      float sin_theta;
      float cos_theta;
      sincosf(theta, &sin_theta, &cos_theta);
      cos_theta *= mscale;
      sin_theta *= mscale;
      const int64_t j0 = args.neox ? i : 2 * i;
      const int64_t j1 = args.neox ? i + half : 2 * i + 1;
      const float x0 = LoadF(a.type, x + j0 * a.nb[0]);
      const float x1 = LoadF(a.type, x + j1 * a.nb[0]);
      StoreF(dst.type, x0 * cos_theta - x1 * sin_theta, out + j0 * dst.nb[0]);
      StoreF(dst.type, x0 * sin_theta + x1 * cos_theta, out + j1 * dst.nb[0]);
    }
  }
}

}  // namespace

cudaError_t SoftMax(const KTensor& dst, const KTensor& a, const KTensor* mask,
                    float scale, float max_bias, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(a);
  const unsigned blocks = RowBlocks(rows);
  const int threads = ReductionThreads(a.ne[0]);
  const KTensor m = mask != nullptr ? *mask : KTensor{};
  const RegisterRows shape = RegisterRowsFor(a.ne[0]);
  if (shape.vec != 0 && RowsFitRegisters(a) && RowsFitRegisters(dst)) {
    WithRegisterVec(shape.vec, [&](auto vec) {
      SoftMaxRegistersKernel<decltype(vec)::value>
          <<<blocks, shape.threads, 0, stream>>>(dst, a, m, mask != nullptr,
                                                 scale, max_bias, rows);
    });
    return cudaGetLastError();
  }
  if (a.ne[0] <= kSoftMaxCacheValues) {
    const size_t shared = static_cast<size_t>(a.ne[0]) * sizeof(float);
    SoftMaxKernel<true><<<blocks, threads, shared, stream>>>(
        dst, a, m, mask != nullptr, scale, max_bias, rows);
  } else {
    SoftMaxKernel<false><<<blocks, threads, 0, stream>>>(
        dst, a, m, mask != nullptr, scale, max_bias, rows);
  }
  return cudaGetLastError();
}

cudaError_t Rope(const KTensor& dst, const KTensor& a, const KTensor& pos,
                 const RopeArgs& args, cudaStream_t stream) {
  if (IsEmpty(dst)) return cudaSuccess;
  const int64_t rows = NumRows(a);
  const RowLaunch l = RowsLaunch(a.ne[0] - args.n_dims / 2, rows);
  RopeKernel<<<l.grid, l.block, 0, stream>>>(dst, a, pos, args, rows);
  return cudaGetLastError();
}

}  // namespace tessera::cuda_kernels
