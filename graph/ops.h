#ifndef TESSERA_GRAPH_OPS_H_
#define TESSERA_GRAPH_OPS_H_

// Builders for every op, with ggml's semantics. Each returns the new tensor
// (owned by `ctx`) or INVALID_ARGUMENT naming the op and the problem when the
// inputs' types or shapes do not fit; nothing aborts on bad input. Results
// are contiguous unless stated. "Float" below means F32, F16 or BF16.
//
// The same checks validate graphs that arrive from the wire: ValidateNode()
// re-derives a node's shape and type from its sources and op_params.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/context.h"
#include "graph/tensor.h"

namespace tessera {

// DUP: a contiguous copy of `a` with a's type.
absl::StatusOr<Tensor*> Dup(Context& ctx, Tensor* a);
// CPY: copies `a` into `b` converting type (same element count; b may be
// quantized when ne[0] is a multiple of its block size, a may be quantized
// when b is F32 or of a's type, copied block by block in flat order).
// Returns a view of `b`; src = {a, b}.
absl::StatusOr<Tensor*> Cpy(Context& ctx, Tensor* a, Tensor* b);
// CONT: a contiguous copy of a possibly strided `a`, same type, in a's
// shape (Cont) or in `ne` (ContAs: 1 to 4 dimensions, as many elements,
// read and written in flat order; ggml_cont_1d .. ggml_cont_4d, which
// llama.cpp's attention uses to merge its heads).
absl::StatusOr<Tensor*> Cont(Context& ctx, Tensor* a);
absl::StatusOr<Tensor*> ContAs(Context& ctx, Tensor* a,
                               absl::Span<const int64_t> ne);

// ADD, SUB, MUL, DIV: a op b, with b broadcast to a (a.ne[i] % b.ne[i] ==
// 0). a Float; b F32 or a's type. Result has a's type and shape.
absl::StatusOr<Tensor*> Add(Context& ctx, Tensor* a, Tensor* b);
absl::StatusOr<Tensor*> Sub(Context& ctx, Tensor* a, Tensor* b);
absl::StatusOr<Tensor*> Mul(Context& ctx, Tensor* a, Tensor* b);
absl::StatusOr<Tensor*> Div(Context& ctx, Tensor* a, Tensor* b);

// SCALE: a * s + bias. a Float. op_params: [0] s (f32), [1] bias (f32).
absl::StatusOr<Tensor*> Scale(Context& ctx, Tensor* a, float s,
                              float bias = 0.0f);
// SQR, SQRT, LOG: elementwise; a Float; result a's type.
absl::StatusOr<Tensor*> Sqr(Context& ctx, Tensor* a);
absl::StatusOr<Tensor*> Sqrt(Context& ctx, Tensor* a);
absl::StatusOr<Tensor*> Log(Context& ctx, Tensor* a);

// SUM_ROWS, MEAN: a F32 [n0, n1, n2, n3] -> F32 [1, n1, n2, n3].
absl::StatusOr<Tensor*> SumRows(Context& ctx, Tensor* a);
absl::StatusOr<Tensor*> Mean(Context& ctx, Tensor* a);
// ARGMAX: a F32 matrix [n0, n1] -> I32 [n1], index of the last maximum (as
// ggml's CPU backend; NaNs never win, a row of NaNs gives 0).
absl::StatusOr<Tensor*> Argmax(Context& ctx, Tensor* a);

// UNARY: elementwise op; a Float; result a's type. op_params: [0] UnaryOp.
// GELU is the tanh approximation.
absl::StatusOr<Tensor*> Unary(Context& ctx, Tensor* a, UnaryOp op);

// GLU: gated linear units. With `b`: act(a) * b, a and b Float of the same
// shape and type. Without `b`: `a` [2n, ...] is split in halves x = first,
// g = second (swapped: the other way) and the result [n, ...] is act(x) * g.
// act is SiLU for SwiGLU and GELU (tanh) for GeGLU.
// op_params: [0] GluOp, [1] swapped (0 or 1). src = {a, b or null}.
absl::StatusOr<Tensor*> Glu(Context& ctx, Tensor* a, Tensor* b, GluOp op);
absl::StatusOr<Tensor*> GluSplit(Context& ctx, Tensor* a, GluOp op,
                                 bool swapped = false);

// NORM: (x - mean) / sqrt(var + eps) per row. RMS_NORM: x / sqrt(mean(x^2)
// + eps) per row. a F32; op_params: [0] eps (f32, >= 0).
absl::StatusOr<Tensor*> Norm(Context& ctx, Tensor* a, float eps);
absl::StatusOr<Tensor*> RmsNorm(Context& ctx, Tensor* a, float eps);

// MUL_MAT: a [k, m, a2, a3] (any type, rows contiguous, not transposed),
// b F32 [k, n, b2, b3] with b2 % a2 == 0 and b3 % a3 == 0 -> F32
// [m, n, b2, b3]; result[i, j] = dot(a row i, b row j), a broadcast over
// dims 2 and 3 (a's index = b's index / (b_k / a_k)).
absl::StatusOr<Tensor*> MulMat(Context& ctx, Tensor* a, Tensor* b);

// GET_ROWS: a [n0, r, a2, a3] (any type), b I32 [n, a2, a3] row indices ->
// [n0, n, a2, a3], F32 (I32 if a is I32). Out-of-range indices are an
// error at compute time.
absl::StatusOr<Tensor*> GetRows(Context& ctx, Tensor* a, Tensor* b);
// SET_ROWS: writes the rows of `b` (F32 or F16 [n0, n, b2, b3]) into `a`
// (F32, F16, BF16 or a quantized type [n0, r, b2, b3]) at the I32 or I64
// indices `c` [n, c1, c2] (b2 % c1 == 0, b3 % c2 == 0). Returns a view of
// `a`; src = {b, c}.
absl::StatusOr<Tensor*> SetRows(Context& ctx, Tensor* a, Tensor* b,
                                Tensor* c);

// VIEW: a view of `a` with shape `ne` and strides `nb` (nb[0] is implied:
// the block size) starting `offset` bytes into a's data. The view must lie
// inside a. op_params: [0..1] offset as two int32 halves (low, high).
absl::StatusOr<Tensor*> View(Context& ctx, Tensor* a,
                             absl::Span<const int64_t> ne,
                             absl::Span<const size_t> nb, size_t offset);
// RESHAPE: a contiguous `a` seen with shape `ne` (same element count).
absl::StatusOr<Tensor*> Reshape(Context& ctx, Tensor* a,
                                absl::Span<const int64_t> ne);
// PERMUTE: axis i of `a` becomes axis axes[i] of the result (ggml_permute).
// op_params: [0..3] axes.
absl::StatusOr<Tensor*> Permute(Context& ctx, Tensor* a, int axis0, int axis1,
                                int axis2, int axis3);
// TRANSPOSE: swaps axes 0 and 1. op_params: [0..3] = {1, 0, 2, 3}.
absl::StatusOr<Tensor*> Transpose(Context& ctx, Tensor* a);

// SOFT_MAX: softmax over rows of (a * scale + slope * mask). a F32 [n0, n1,
// n2, n3]; mask optional, F32 or F16 [n0, >= n1, m2, m3] with n2 % m2 == 0
// and n3 % m3 == 0. With max_bias > 0 the slope is ALiBi's per head (dim 2):
// m0 = 2^(-max_bias / h), m1 = 2^(-max_bias / 2 / h), h = 2^floor(log2 n2),
// slope = head < h ? m0^(head + 1) : m1^(2 (head - h) + 1); otherwise 1.
// op_params: [0] scale (f32), [1] max_bias (f32). src = {a, mask}.
absl::StatusOr<Tensor*> SoftMax(Context& ctx, Tensor* a, Tensor* mask,
                                float scale, float max_bias);

// ROPE: rotary position embedding. a F32 or F16 [head_dim, n_head, n_tokens,
// n3]; pos I32 [n_tokens], the same for every index of dim 3. The first n_dims (even, <= head_dim) values of each
// row rotate; mode kRopeNormal pairs (2i, 2i+1), kRopeNeox pairs (i, i +
// n_dims/2). theta_i = pos * freq_scale * base^(-2i/n_dims), with YaRN
// extrapolation mixing when ext_factor != 0 (ggml's rope_yarn).
// With `freq_factors` (ggml_rope_ext's third source, as LLaMA 3.1+ uses it:
// F32 [>= n_dims/2], one value per rotated pair) theta_extrap of pair i is
// divided by freq_factors[i] before the YaRN mixing.
// op_params: [1] n_dims, [2] mode, [4] n_ctx_orig, [5] freq_base, [6]
// freq_scale, [7] ext_factor, [8] attn_factor, [9] beta_fast, [10]
// beta_slow (floats as f32). src = {a, pos, freq_factors or null}.
struct RopeParams {
  int32_t n_dims = 0;
  int32_t mode = kRopeNormal;
  int32_t n_ctx_orig = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};
absl::StatusOr<Tensor*> Rope(Context& ctx, Tensor* a, Tensor* pos,
                             const RopeParams& params,
                             Tensor* freq_factors = nullptr);

// CONCAT: a and b (same non-quantized type, equal in every dimension but
// `dim`) joined along `dim`. op_params: [0] dim.
absl::StatusOr<Tensor*> Concat(Context& ctx, Tensor* a, Tensor* b, int dim);
// ARGSORT: a F32 -> I32 same shape; per row, the indices that sort it
// (stable). op_params: [0] SortOrder.
absl::StatusOr<Tensor*> Argsort(Context& ctx, Tensor* a, SortOrder order);

// FLASH_ATTN_EXT: softmax(q k^T * scale + slope * mask) v, fused.
// q F32 [d, n_q, h, b]; k [d, n_kv, h_kv, b] and v [d_v, n_kv, h_kv, b] of
// any type IsAttnKvType takes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1;
// each independent, rows of whole blocks) with h % h_kv == 0 (grouped-query
// attention); mask optional F16 or F32 [n_kv, >= n_q, m2, m3] broadcast over
// heads/batches like SOFT_MAX. logit_softcap > 0 applies softcap * tanh(x /
// softcap) to the scaled scores before the mask. Result F32 [d_v, h, n_q, b]
// (ggml's permuted layout). op_params: [0] scale, [1] max_bias, [2]
// logit_softcap (f32).
absl::StatusOr<Tensor*> FlashAttnExt(Context& ctx, Tensor* q, Tensor* k,
                                     Tensor* v, Tensor* mask, float scale,
                                     float max_bias, float logit_softcap);

// Checks that `node`'s type, shape, strides and op_params are exactly what
// its builder would produce from its sources (used for graphs from the
// wire). Errors: INVALID_ARGUMENT naming the node and the problem.
absl::Status ValidateNode(const Tensor& node);

}  // namespace tessera

#endif  // TESSERA_GRAPH_OPS_H_
