#include "backend/cpu/cpu_copy.h"

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/work_split.h"
#include "graph/type.h"

namespace tessera {
namespace {

// Moves n values from src to dst: a memmove of whole blocks for the same
// type (a graph may lay dst over src), else a level conversion.
using MoveFn = void (*)(const CpuKernels& kernels, const char* src, char* dst,
                        int64_t n, Type type);

void MoveSame(const CpuKernels&, const char* src, char* dst, int64_t n,
              Type type) {
  const TypeTraits& traits = Traits(type);
  std::memmove(dst, src, n / traits.block_size * traits.type_size);
}

void MoveF16ToF32(const CpuKernels& k, const char* src, char* dst, int64_t n,
                  Type) {
  k.f16_to_f32(reinterpret_cast<const uint16_t*>(src),
               reinterpret_cast<float*>(dst), n);
}

void MoveBf16ToF32(const CpuKernels& k, const char* src, char* dst, int64_t n,
                   Type) {
  k.bf16_to_f32(reinterpret_cast<const uint16_t*>(src),
                reinterpret_cast<float*>(dst), n);
}

void MoveF32ToF16(const CpuKernels& k, const char* src, char* dst, int64_t n,
                  Type) {
  k.f32_to_f16(reinterpret_cast<const float*>(src),
               reinterpret_cast<uint16_t*>(dst), n);
}

void MoveF32ToBf16(const CpuKernels& k, const char* src, char* dst, int64_t n,
                   Type) {
  k.f32_to_bf16(reinterpret_cast<const float*>(src),
                reinterpret_cast<uint16_t*>(dst), n);
}

// The move of a type pair; null for a pair without a fast path.
MoveFn MoveFor(Type from, Type to) {
  if (from == to) return MoveSame;
  if (to == Type::kF32 && from == Type::kF16) return MoveF16ToF32;
  if (to == Type::kF32 && from == Type::kBF16) return MoveBf16ToF32;
  if (from == Type::kF32 && to == Type::kF16) return MoveF32ToF16;
  if (from == Type::kF32 && to == Type::kBF16) return MoveF32ToBf16;
  return nullptr;
}

// Whether the bytes `a` and `b` span (first to last element) overlap.
bool Overlap(const Tensor& a, const Tensor& b) {
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.NumBytes() && b0 < a0 + a.NumBytes();
}

}  // namespace

bool TryCopy(Tensor& node, const CpuComputeContext& ctx) {
  const Tensor* src = node.src[0];
  if (src == nullptr || src->data == nullptr || node.data == nullptr ||
      node.IsEmpty() || src->NumElements() != node.NumElements() ||
      Overlap(node, *src)) {
    return false;
  }
  const MoveFn move = MoveFor(src->type, node.type);
  if (move == nullptr) return false;
  const int64_t bs = Traits(node.type).block_size;
  const char* from = static_cast<const char*>(src->data);
  char* to = static_cast<char*>(node.data);
  if (node.IsContiguous() && src->IsContiguous()) {
    // Flat: whole blocks of both types (block size 1 unless the same
    // quantized type).
    const WorkRange part = WorkPart(node.NumElements() / bs, ctx.ith, ctx.nth);
    const int64_t first = part.begin * bs;
    const int64_t n = (part.end - part.begin) * bs;
    if (n == 0) return true;
    move(*ctx.kernels, from + first / bs * Traits(src->type).type_size,
         to + first / bs * Traits(node.type).type_size, n, node.type);
    return true;
  }
  if (!SameShape(node, *src) || !node.HasContiguousRows() ||
      !src->HasContiguousRows()) {
    return false;
  }
  ForEachRowIn(WorkPart(node.NumRows(), ctx.ith, ctx.nth), node.ne[1],
               node.ne[2], [&](int64_t i1, int64_t i2, int64_t i3) {
                 move(
                     *ctx.kernels,
                     from + i1 * src->nb[1] + i2 * src->nb[2] + i3 * src->nb[3],
                     to + i1 * node.nb[1] + i2 * node.nb[2] + i3 * node.nb[3],
                     node.ne[0], node.type);
               });
  return true;
}

}  // namespace tessera
