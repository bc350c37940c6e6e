#ifndef TESSERA_BACKEND_CUDA_KERNELS_H_
#define TESSERA_BACKEND_CUDA_KERNELS_H_

// Launchers of the CUDA kernels, one per op family (the .cu files of this
// directory). Plain C++ so that nvcc and the host compiler both read it.
//
// Every launcher queues its kernels on `stream` and returns the launch
// error (cudaSuccess when queued). Tensors are passed as KTensor: any
// strides work (permuted and strided views), as in graph/reference.h, and
// the results match the reference kernels' semantics (ggml's). The caller
// has checked types and shapes (cuda_compute.cc): the launchers trust them.
// Row counts and every ne[i] are below 2^31; empty tensors launch nothing.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernel_error.h"

namespace tessera::cuda_kernels {

// Element types; the values are graph/type.h's Type values.
enum KType : int32_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kI32 = 3,
  kQ8_0 = 4,
  kQ4_0 = 5,
  kQ4_K = 6,  // 256-value super-blocks (graph/kquant.h); read, not written
  kQ5_K = 7,
  kQ6_K = 8,
  kI64 = 9,  // row ids of GET_ROWS and SET_ROWS
  // 32-value blocks with an offset or a fifth bit (graph/block_quant.h).
  kQ4_1 = 10,
  kQ5_0 = 11,
  kQ5_1 = 12,
  kQ2_K = 13,  // 256-value super-blocks; read, not written
  kQ3_K = 14,
};

// A tensor as kernels see it: device address, type, shape, byte strides.
struct KTensor {
  char* data = nullptr;
  int32_t type = kF32;
  int64_t ne[4] = {1, 1, 1, 1};
  int64_t nb[4] = {0, 0, 0, 0};
};

enum class BinaryOp : int32_t { kAdd, kSub, kMul, kDiv };

// Elementwise maps of one input: SCALE (x * scale + bias), SQR, SQRT, LOG
// and the unary ops.
enum class MapOp : int32_t {
  kScale,
  kSqr,
  kSqrt,
  kLog,
  kNeg,
  kRelu,
  kGelu,
  kSilu,
  kSigmoid,
  kTanh,
  kExp,
};

// elementwise.cu
// dst = a op b, b broadcast to a (b.ne[i] divides a.ne[i]); dst may alias a.
cudaError_t Binary(BinaryOp op, const KTensor& dst, const KTensor& a,
                   const KTensor& b, cudaStream_t stream);
cudaError_t Map(MapOp op, float scale, float bias, const KTensor& dst,
                const KTensor& a, cudaStream_t stream);
// act(x) * g with x, g from `b` (when non-null) or the halves of a's rows.
cudaError_t Glu(bool geglu, bool swapped, const KTensor& dst, const KTensor& a,
                const KTensor* b, cudaStream_t stream);

// rows.cu
cudaError_t SumRows(bool mean, const KTensor& dst, const KTensor& a,
                    cudaStream_t stream);
cudaError_t Norm(bool rms, float eps, const KTensor& dst, const KTensor& a,
                 cudaStream_t stream);
cudaError_t Argmax(const KTensor& dst, const KTensor& a, cudaStream_t stream);
// Rows of at most kMaxArgsortCols values.
inline constexpr int64_t kMaxArgsortCols = 8192;
cudaError_t Argsort(bool descending, const KTensor& dst, const KTensor& a,
                    cudaStream_t stream);

// attention.cu
cudaError_t SoftMax(const KTensor& dst, const KTensor& a, const KTensor* mask,
                    float scale, float max_bias, cudaStream_t stream);
struct RopeArgs {
  int32_t n_dims;
  bool neox;
  float freq_base;
  float freq_scale;
  float ext_factor;
  float attn_factor;
  // YaRN correction dims (clamped), computed on the host as the reference
  // kernel does.
  float corr_low;
  float corr_high;
  // ROPE's optional F32 frequency factors (src[2]): theta_extrap of pair i
  // is divided by *(float*)(freq_factors + i * freq_factors_nb0); null for
  // none.
  const char* freq_factors = nullptr;
  int64_t freq_factors_nb0 = 0;
};
cudaError_t Rope(const KTensor& dst, const KTensor& a, const KTensor& pos,
                 const RopeArgs& args, cudaStream_t stream);

// flash_attn.cu. Head sizes up to kMaxFlashAttnHead. When the output has
// few rows the keys of each row are split over several blocks whose
// partial results go to `scratch` (device memory, 4-byte aligned) before
// a second kernel merges them: FlashAttnScratchBytes(dst, k) bytes, 0 when
// the keys are not split. A smaller `scratch_bytes` is cudaErrorInvalidValue.
size_t FlashAttnScratchBytes(const KTensor& dst, const KTensor& k);
inline constexpr int64_t kMaxFlashAttnHead = 1024;
cudaError_t FlashAttn(const KTensor& dst, const KTensor& q, const KTensor& k,
                      const KTensor& v, const KTensor* mask, float scale,
                      float max_bias, float softcap, void* scratch,
                      size_t scratch_bytes, cudaStream_t stream);

// copy.cu
// Copies the values of `src` into `dst` (same element count) in row-major
// order: bit copies for equal types, through float otherwise, quantizing
// into Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 (ne[0] a multiple of 32) as
// graph/type.h's and graph/block_quant.h's quantizers do. K-quant sources
// are dequantized; K-quant destinations are cudaErrorInvalidValue.
cudaError_t Copy(const KTensor& dst, const KTensor& src, cudaStream_t stream);
// GET_ROWS and SET_ROWS; an index out of range is reported in `error`
// (tagged with `op`) and its row is skipped. SET_ROWS into a type Copy does
// not write is cudaErrorInvalidValue.
cudaError_t GetRows(const KTensor& dst, const KTensor& a, const KTensor& idx,
                    int32_t op, KernelError* error, cudaStream_t stream);
cudaError_t SetRows(const KTensor& dst, const KTensor& b, const KTensor& idx,
                    int32_t op, KernelError* error, cudaStream_t stream);
cudaError_t Concat(const KTensor& dst, const KTensor& a, const KTensor& b,
                   int dim, cudaStream_t stream);
// Copies *from into *to unless *to already holds an error (from may be
// mapped host memory).
cudaError_t MergeKernelError(KernelError* to, const KernelError* from,
                             cudaStream_t stream);
// Holds `stream` until *flag (mapped host memory, written by the host)
// reaches `target`: one thread that polls with pauses, so the GPU's other
// work goes on meanwhile.
cudaError_t WaitHostFlag(const uint64_t* flag, uint64_t target,
                         cudaStream_t stream);

// mul_mat.cu
// dst[i, 0, i2, i3] = dot(a row i, b row 0) for b with one column per
// batch (b.ne[1] == 1); a of any type, broadcast over dims 2 and 3 (see
// mul_mat.cu for the kernels and which layouts take which). Q8_0, Q4_0
// and Q4_K weights round the activations to 8 bits in `scratch` (device
// memory, 16-byte aligned): MatVecScratchBytes(a, b) bytes, 0 for the
// other types. A smaller `scratch_bytes` is cudaErrorInvalidValue.
size_t MatVecScratchBytes(const KTensor& a, const KTensor& b);
cudaError_t MatVec(const KTensor& dst, const KTensor& a, const KTensor& b,
                   void* scratch, size_t scratch_bytes, cudaStream_t stream);

}  // namespace tessera::cuda_kernels

#endif  // TESSERA_BACKEND_CUDA_KERNELS_H_
