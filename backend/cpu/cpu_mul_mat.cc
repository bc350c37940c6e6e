#include "backend/cpu/cpu_mul_mat.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/kernels.h"
#include "backend/cpu/work_split.h"
#include "graph/type.h"

namespace tessera {
namespace {

enum class Path { kNone, kMatVec, kF32, kConvert, kQuant, kTiles, kFloatGemm };

bool RowStrideFits(size_t nb1, int64_t ne0) {
  return nb1 % sizeof(float) == 0 &&
         nb1 >= static_cast<size_t>(ne0) * sizeof(float);
}

// The level's tile product for weights of `type`, or null.
void (*TileKernel(const CpuKernels& kernels, Type type))(const TileGemmArgs&) {
  switch (type) {
    case Type::kBF16:
      return kernels.tile_mul_mat_bf16;
    case Type::kF16:
      return kernels.tile_mul_mat_f16;
    case Type::kQ8_0:
      return kernels.tile_mul_mat_q8_0;
    case Type::kQ4_0:
      return kernels.tile_mul_mat_q4_0;
    default:
      return nullptr;
  }
}

// The level's float product of many columns for weights of `type`, or
// null.
void (*FloatGemmKernel(const CpuKernels& kernels,
                       Type type))(const FloatGemmArgs&) {
  switch (type) {
    case Type::kF32:
      return kernels.gemm_f32;
    case Type::kF16:
      return kernels.gemm_f16;
    case Type::kBF16:
      return kernels.gemm_bf16;
    default:
      return nullptr;
  }
}

Path PathFor(const Tensor& node, const CpuKernels& kernels) {
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  if (a == nullptr || b == nullptr || node.type != Type::kF32 ||
      b->type != Type::kF32 || node.IsEmpty() || node.data == nullptr ||
      a->data == nullptr || b->data == nullptr) {
    return Path::kNone;
  }
  const int64_t k = a->ne[0];
  const int64_t m = a->ne[1];
  if (k <= 0 || b->ne[0] != k || node.ne[0] != m || node.ne[1] != b->ne[1] ||
      node.ne[2] != b->ne[2] || node.ne[3] != b->ne[3] || a->ne[2] <= 0 ||
      a->ne[3] <= 0 || b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0 ||
      b->nb[0] != sizeof(float) || node.nb[0] != sizeof(float)) {
    return Path::kNone;
  }
  const bool blas_strides =
      RowStrideFits(b->nb[1], k) && RowStrideFits(node.nb[1], m);
  const bool float_weights = a->type == Type::kF32 || a->type == Type::kF16 ||
                             a->type == Type::kBF16;
  // The level's own products read src0 rows of values as they lie and
  // src1 and dst columns of whole floats.
  const bool own_strides = a->nb[0] == Traits(a->type).type_size &&
                           b->nb[1] % sizeof(float) == 0 &&
                           node.nb[1] % sizeof(float) == 0;
  if (own_strides && float_weights && node.ne[1] <= kMaxMatVecCols) {
    return Path::kMatVec;
  }
  if (own_strides && node.ne[1] >= kMinTileCols) {
    if (TileKernel(kernels, a->type) != nullptr && k % 32 == 0) {
      return Path::kTiles;
    }
    if (FloatGemmKernel(kernels, a->type) != nullptr && k % 16 == 0) {
      return Path::kFloatGemm;
    }
  }
  switch (a->type) {
    case Type::kF32:
      return blas_strides && a->nb[0] == sizeof(float) &&
                     RowStrideFits(a->nb[1], k)
                 ? Path::kF32
                 : Path::kNone;
    case Type::kF16:
    case Type::kBF16:
      return blas_strides && a->nb[0] == sizeof(uint16_t) ? Path::kConvert
                                                          : Path::kNone;
    case Type::kQ8_0:
    case Type::kQ4_0:
    case Type::kQ4_1:
    case Type::kQ5_0:
    case Type::kQ5_1:
    case Type::kQ2_K:
    case Type::kQ3_K:
    case Type::kQ4_K:
    case Type::kQ5_K:
    case Type::kQ6_K:
      return k % Traits(a->type).block_size == 0 &&
                     a->nb[0] == Traits(a->type).type_size &&
                     node.nb[1] % sizeof(float) == 0
                 ? Path::kQuant
                 : Path::kNone;
    default:
      return Path::kNone;
  }
}

// Rows of src0 converted to F32 per sgemm call: enough to amortize
// OpenBLAS's packing of src1 when src1 has many columns, few (staying in
// cache) when it has few.
int64_t ConvertBand(const Tensor& node) {
  return node.ne[1] >= 32 ? 256 : 32;
}

size_t ConvertBytesPerThread(const Tensor& node) {
  const size_t bytes = static_cast<size_t>(ConvertBand(node)) *
                       static_cast<size_t>(node.src[0]->ne[0]) * sizeof(float);
  return (bytes + 63) / 64 * 64;
}

// Calls fn(i12, i13, row_begin, row_end) for this thread's part of the
// product: whole batches (dims 2 and 3 of dst) when there are at least as
// many as threads, else a range of src0 rows of every batch.
template <typename Fn>
void ForEachPart(const Tensor& node, const CpuComputeContext& ctx, Fn fn) {
  const int64_t ne2 = node.ne[2];
  const int64_t batches = ne2 * node.ne[3];
  const int64_t m = node.ne[0];
  if (batches >= ctx.nth) {
    const WorkRange part = WorkPart(batches, ctx.ith, ctx.nth);
    for (int64_t t = part.begin; t < part.end; ++t) fn(t % ne2, t / ne2, 0, m);
    return;
  }
  const WorkRange rows = WorkPart(m, ctx.ith, ctx.nth);
  if (rows.begin == rows.end) return;
  for (int64_t t = 0; t < batches; ++t) {
    fn(t % ne2, t / ne2, rows.begin, rows.end);
  }
}

// Address of src0 row `row` of the src0 matrix that dst batch (i12, i13)
// multiplies with (broadcast over dims 2 and 3).
const char* Src0Row(const Tensor& node, int64_t row, int64_t i12,
                    int64_t i13) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t i02 = i12 / (b.ne[2] / a.ne[2]);
  const int64_t i03 = i13 / (b.ne[3] / a.ne[3]);
  return static_cast<const char*>(a.data) + row * a.nb[1] + i02 * a.nb[2] +
         i03 * a.nb[3];
}

const float* Src1Batch(const Tensor& node, int64_t i12, int64_t i13) {
  const Tensor& b = *node.src[1];
  return reinterpret_cast<const float*>(static_cast<const char*>(b.data) +
                                        i12 * b.nb[2] + i13 * b.nb[3]);
}

float* DstAt(const Tensor& node, int64_t row, int64_t i12, int64_t i13) {
  return reinterpret_cast<float*>(static_cast<char*>(node.data) +
                                  i12 * node.nb[2] + i13 * node.nb[3]) +
         row;
}

// dst rows [0, n) x cols [0, rows) = src1 (n x k) * w (rows x k)^T.
void Sgemm(const Tensor& node, const float* w, int64_t ldw, int64_t rows,
           const float* src1, float* dst) {
  const int64_t k = node.src[0]->ne[0];
  const int64_t n = node.ne[1];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, k, 1.0f, src1,
              node.src[1]->nb[1] / sizeof(float), w, ldw, 0.0f, dst,
              node.nb[1] / sizeof(float));
}

void MulMatF32(Tensor& node, const CpuComputeContext& ctx) {
  const size_t lda = node.src[0]->nb[1] / sizeof(float);
  ForEachPart(node, ctx, [&](int64_t i12, int64_t i13, int64_t r0, int64_t r1) {
    Sgemm(node, reinterpret_cast<const float*>(Src0Row(node, r0, i12, i13)),
          lda, r1 - r0, Src1Batch(node, i12, i13), DstAt(node, r0, i12, i13));
  });
}

void MulMatConvert(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor& a = *node.src[0];
  const int64_t k = a.ne[0];
  const int64_t band = ConvertBand(node);
  float* scratch =
      reinterpret_cast<float*>(ctx.work + ctx.ith * ConvertBytesPerThread(node));
  auto convert = a.type == Type::kF16 ? ctx.kernels->f16_to_f32
                                      : ctx.kernels->bf16_to_f32;
  ForEachPart(node, ctx, [&](int64_t i12, int64_t i13, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r += band) {
      const int64_t rows = std::min(band, r1 - r);
      for (int64_t i = 0; i < rows; ++i) {
        convert(reinterpret_cast<const uint16_t*>(Src0Row(node, r + i, i12, i13)),
                scratch + i * k, k);
      }
      Sgemm(node, scratch, k, rows, Src1Batch(node, i12, i13),
            DstAt(node, r, i12, i13));
    }
  });
}

// The operands of a float product for src0 rows [r0, r1) of dst batch
// (i12, i13), against every src1 column.
FloatMatVecArgs FloatProductArgs(const Tensor& node, int64_t i12, int64_t i13,
                                 int64_t r0, int64_t r1) {
  const Tensor& a = *node.src[0];
  FloatMatVecArgs args;
  args.w = Src0Row(node, r0, i12, i13);
  args.w_row_bytes = a.nb[1];
  args.rows = r1 - r0;
  args.x = Src1Batch(node, i12, i13);
  args.x_col_stride = node.src[1]->nb[1] / sizeof(float);
  args.cols = node.ne[1];
  args.k = a.ne[0];
  args.dst = DstAt(node, r0, i12, i13);
  args.dst_col_stride = node.nb[1] / sizeof(float);
  return args;
}

void MulMatVec(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor& a = *node.src[0];
  auto kernel = a.type == Type::kF32   ? ctx.kernels->mat_vec_f32
                : a.type == Type::kF16 ? ctx.kernels->mat_vec_f16
                                       : ctx.kernels->mat_vec_bf16;
  ForEachPart(node, ctx, [&](int64_t i12, int64_t i13, int64_t r0, int64_t r1) {
    kernel(FloatProductArgs(node, i12, i13, r0, r1));
  });
}

// F16 and BF16 weights against many columns by the level's FMAs, each
// thread with its scratch band.
void MulMatFloatGemm(Tensor& node, const CpuComputeContext& ctx) {
  auto kernel = FloatGemmKernel(*ctx.kernels, node.src[0]->type);
  char* scratch = ctx.work + ctx.ith * kFloatGemmScratchBytes;
  ForEachPart(node, ctx, [&](int64_t i12, int64_t i13, int64_t r0, int64_t r1) {
    kernel(FloatGemmArgs{FloatProductArgs(node, i12, i13, r0, r1), scratch});
  });
}

using QuantMatMulFn = void (*)(const QuantMatMulArgs&);

// The product kernel of a Path::kQuant weight type.
QuantMatMulFn QuantKernel(const CpuKernels& kernels, Type type) {
  switch (type) {
    case Type::kQ8_0:
      return kernels.mul_mat_q8_0;
    case Type::kQ4_1:
      return kernels.mul_mat_q4_1;
    case Type::kQ5_0:
      return kernels.mul_mat_q5_0;
    case Type::kQ5_1:
      return kernels.mul_mat_q5_1;
    case Type::kQ2_K:
      return kernels.mul_mat_q2_k;
    case Type::kQ3_K:
      return kernels.mul_mat_q3_k;
    case Type::kQ4_K:
      return kernels.mul_mat_q4_k;
    case Type::kQ5_K:
      return kernels.mul_mat_q5_k;
    case Type::kQ6_K:
      return kernels.mul_mat_q6_k;
    case Type::kQ4_0:
      return kernels.mul_mat_q4_0;
    default:
      return nullptr;  // not a Path::kQuant type
  }
}

// Bytes of one quantized activation row for weights of `type`.
size_t ActBytesFor(Type type, int64_t k) {
  return IsKQuant(type) ? KActRowBytes(k) : ActRowBytes(k);
}

int64_t Src1Rows(const Tensor& node) {
  const Tensor& b = *node.src[1];
  return b.ne[1] * b.ne[2] * b.ne[3];
}

// Quantizes every src1 row into ctx.work (all threads, then a barrier),
// rows of ActBytesFor bytes in (i11, i12, i13) order.
void QuantizeSrc1(const Tensor& node, const CpuComputeContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t k = a.ne[0];
  const size_t act_bytes = ActBytesFor(a.type, k);
  auto quantize = IsKQuant(a.type) ? ctx.kernels->quantize_act_k
                                   : ctx.kernels->quantize_act;
  const int64_t src1_rows = Src1Rows(node);
  const WorkRange mine = WorkPart(src1_rows, ctx.ith, ctx.nth);
  for (int64_t t = mine.begin; t < mine.end; ++t) {
    const int64_t i11 = t % b.ne[1];
    const int64_t i12 = (t / b.ne[1]) % b.ne[2];
    const int64_t i13 = t / (b.ne[1] * b.ne[2]);
    const float* x = reinterpret_cast<const float*>(
        static_cast<const char*>(b.data) + i11 * b.nb[1] + i12 * b.nb[2] +
        i13 * b.nb[3]);
    quantize(x, ctx.work + t * act_bytes, k);
  }
  ctx.barrier();
}

void MulMatQuant(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t k = a.ne[0];
  const size_t act_bytes = ActBytesFor(a.type, k);
  QuantizeSrc1(node, ctx);
  // Integer dot products over this thread's part of the src0 rows.
  auto kernel = QuantKernel(*ctx.kernels, a.type);
  ForEachPart(node, ctx, [&](int64_t i12, int64_t i13, int64_t r0, int64_t r1) {
    QuantMatMulArgs args;
    args.w = Src0Row(node, r0, i12, i13);
    args.w_row_bytes = a.nb[1];
    args.rows = r1 - r0;
    args.act = ctx.work + (i13 * b.ne[2] + i12) * b.ne[1] * act_bytes;
    args.act_row_bytes = act_bytes;
    args.cols = b.ne[1];
    args.k = k;
    args.dst = DstAt(node, r0, i12, i13);
    args.dst_col_stride = node.nb[1] / sizeof(float);
    kernel(args);
  });
}

// F16 and BF16 tile products take their columns packed, not quantized.
bool IsFloatWeights(Type type) {
  return type == Type::kBF16 || type == Type::kF16;
}

// The work memory of Path::kTiles: quantized src1 rows (quantized weights
// only), then the packed column groups of every batch, then each thread's
// scratch.
struct TileWork {
  size_t act_bytes;     // all quantized rows
  size_t group_bytes;   // one packed group
  int64_t groups;       // per batch
  size_t packed_bytes;  // every batch's groups
  size_t scratch_bytes; // per thread
};

TileWork TileWorkFor(const Tensor& node) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t k = a.ne[0];
  TileWork w;
  w.act_bytes = IsFloatWeights(a.type)
                    ? 0
                    : static_cast<size_t>(Src1Rows(node)) * ActRowBytes(k);
  w.group_bytes = TileGroupBytes(a.type, k);
  w.groups = (b.ne[1] + kTileCols - 1) / kTileCols;
  w.packed_bytes =
      static_cast<size_t>(w.groups * b.ne[2] * b.ne[3]) * w.group_bytes;
  w.scratch_bytes = TileScratchBytes(a.type, k);
  return w;
}

// Products on the tile units: src1 quantized (for quantized weights), then
// packed in groups of kTileCols columns (all threads, then a barrier), then
// this thread's part of the src0 rows against every group.
void MulMatTiles(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor& a = *node.src[0];
  const Tensor& b = *node.src[1];
  const int64_t k = a.ne[0];
  const int64_t n = b.ne[1];
  const bool quantized = !IsFloatWeights(a.type);
  const TileWork w = TileWorkFor(node);
  char* packed = ctx.work + w.act_bytes;
  if (quantized) QuantizeSrc1(node, ctx);
  const int64_t batches = b.ne[2] * b.ne[3];
  const WorkRange mine = WorkPart(batches * w.groups, ctx.ith, ctx.nth);
  for (int64_t t = mine.begin; t < mine.end; ++t) {
    const int64_t batch = t / w.groups;
    const int64_t c0 = (t % w.groups) * kTileCols;
    const int64_t cols = std::min(kTileCols, n - c0);
    char* group = packed + t * w.group_bytes;
    if (quantized) {
      const size_t act_bytes = ActRowBytes(k);
      ctx.kernels->tile_pack_q8(ctx.work + (batch * n + c0) * act_bytes,
                                act_bytes, cols, k, group);
    } else {
      const int64_t stride = b.nb[1] / sizeof(float);
      ctx.kernels->tile_pack_bf16(
          Src1Batch(node, batch % b.ne[2], batch / b.ne[2]) + c0 * stride,
          stride, cols, k, group);
    }
  }
  ctx.barrier();
  auto kernel = TileKernel(*ctx.kernels, a.type);
  char* scratch = packed + w.packed_bytes + ctx.ith * w.scratch_bytes;
  ForEachPart(node, ctx, [&](int64_t i12, int64_t i13, int64_t r0, int64_t r1) {
    TileGemmArgs args;
    args.w = Src0Row(node, r0, i12, i13);
    args.w_row_bytes = a.nb[1];
    args.rows = r1 - r0;
    args.packed = packed + (i13 * b.ne[2] + i12) * w.groups * w.group_bytes;
    args.cols = n;
    args.k = k;
    args.dst = DstAt(node, r0, i12, i13);
    args.dst_col_stride = node.nb[1] / sizeof(float);
    args.scratch = scratch;
    kernel(args);
  });
}

}  // namespace

size_t MulMatWorkSize(const Tensor& node, int nth,
                      const CpuKernels& kernels) {
  switch (PathFor(node, kernels)) {
    case Path::kTiles: {
      const TileWork w = TileWorkFor(node);
      return w.act_bytes + w.packed_bytes +
             static_cast<size_t>(nth) * w.scratch_bytes;
    }
    case Path::kConvert:
      return static_cast<size_t>(nth) * ConvertBytesPerThread(node);
    case Path::kFloatGemm:
      return static_cast<size_t>(nth) * kFloatGemmScratchBytes;
    case Path::kQuant:
      return static_cast<size_t>(Src1Rows(node)) *
             ActBytesFor(node.src[0]->type, node.src[0]->ne[0]);
    case Path::kMatVec:
    case Path::kF32:
    case Path::kNone:
      break;
  }
  return 0;
}

bool TryMulMat(Tensor& node, const CpuComputeContext& ctx) {
  const Path path = PathFor(node, *ctx.kernels);
  if (path == Path::kNone) return false;
  if (path == Path::kMatVec) {
    MulMatVec(node, ctx);
    return true;
  }
  if (path == Path::kQuant) {
    MulMatQuant(node, ctx);
    return true;
  }
  if (path == Path::kTiles) {
    MulMatTiles(node, ctx);
    return true;
  }
  if (path == Path::kFloatGemm) {
    MulMatFloatGemm(node, ctx);
    return true;
  }
  // OpenBLAS runs single-threaded inside each thread of the team.
  if (ctx.ith == 0 && openblas_get_num_threads() != 1) {
    openblas_set_num_threads(1);
  }
  ctx.barrier();
  if (path == Path::kF32) {
    MulMatF32(node, ctx);
  } else {
    MulMatConvert(node, ctx);
  }
  return true;
}

}  // namespace tessera
