#ifndef TESSERA_GRAPH_TENSOR_H_
#define TESSERA_GRAPH_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "graph/type.h"

namespace tessera {

class Buffer;  // backend/buffer.h

inline constexpr int kMaxDims = 4;
inline constexpr int kMaxSrc = 10;
inline constexpr int kMaxOpParams = 16;

// Operations. The numeric values are part of the wire format. Semantics of
// shapes, broadcasting and op_params follow ggml; graph/ops.h documents each.
enum class Op : int32_t {
  kNone = 0,
  kDup,
  kCpy,
  kCont,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kScale,
  kSqr,
  kSqrt,
  kLog,
  kSumRows,
  kMean,
  kArgmax,
  kUnary,
  kGlu,
  kNorm,
  kRmsNorm,
  kMulMat,
  kGetRows,
  kSetRows,
  kView,
  kReshape,
  kPermute,
  kTranspose,
  kSoftMax,
  kRope,
  kConcat,
  kArgsort,
  kFlashAttnExt,
};
inline constexpr int kOpCount = static_cast<int>(Op::kFlashAttnExt) + 1;

// op_params[0] of Op::kUnary.
enum class UnaryOp : int32_t { kNeg, kRelu, kGelu, kSilu, kSigmoid, kTanh, kExp };
inline constexpr int kUnaryOpCount = static_cast<int>(UnaryOp::kExp) + 1;

// op_params[0] of Op::kGlu.
enum class GluOp : int32_t { kSwiGlu, kGeGlu };
inline constexpr int kGluOpCount = static_cast<int>(GluOp::kGeGlu) + 1;

// op_params[0] of Op::kArgsort.
enum class SortOrder : int32_t { kAscending, kDescending };

// op_params[2] of Op::kRope.
inline constexpr int32_t kRopeNormal = 0;
inline constexpr int32_t kRopeNeox = 2;

std::string_view OpName(Op op);
std::string_view UnaryOpName(UnaryOp op);
std::string_view GluOpName(GluOp op);

enum TensorFlag : uint32_t {
  kFlagInput = 1u << 0,   // set by the client before compute
  kFlagOutput = 1u << 1,  // read after compute; never reused by allocators
  kFlagParam = 1u << 2,   // a weight (trainable parameter in ggml)
};

// A tensor: shape, strides, the op that produces it and where its data is.
// Plain data; owned by a Context (graph/context.h), which hands out stable
// pointers. `ne[0]` is the innermost dimension; `nb[i]` is the byte stride of
// dimension i (nb[0] is the size of one block).
struct Tensor {
  Type type = Type::kF32;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};
  size_t nb[kMaxDims] = {0, 0, 0, 0};

  Op op = Op::kNone;
  int32_t op_params[kMaxOpParams] = {};
  Tensor* src[kMaxSrc] = {};

  // For views: the tensor whose memory this one aliases and the byte offset.
  Tensor* view_src = nullptr;
  size_t view_offs = 0;

  // Where the data lives: `data` is an address inside `buffer` (a device
  // address for non-host buffers), or null while unallocated.
  void* data = nullptr;
  Buffer* buffer = nullptr;

  std::string name;
  uint32_t flags = 0;

  int64_t NumElements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t NumRows() const { return ne[1] * ne[2] * ne[3]; }
  // Bytes spanned from the first to one past the last element (ggml_nbytes).
  // Wraps around for corrupt shapes or strides: use CheckedNumBytes on
  // tensors that came from outside.
  size_t NumBytes() const;
  // Bytes of one row of ne[0] values.
  size_t RowBytes() const { return RowSize(type, ne[0]); }
  bool IsEmpty() const { return NumElements() == 0; }
  // Rows packed one after another with no gaps.
  bool IsContiguous() const;
  // nb[0] > nb[1]: a transposed view.
  bool IsTransposed() const { return nb[0] > nb[1]; }
  // Each row is contiguous (nb[0] is the element size); rows may be strided.
  bool HasContiguousRows() const;
  bool IsView() const { return view_src != nullptr; }
  bool HasFlag(TensorFlag f) const { return (flags & f) != 0; }

  template <typename T>
  T param(int i) const {
    static_assert(sizeof(T) == sizeof(int32_t));
    T v;
    std::memcpy(&v, &op_params[i], sizeof(T));
    return v;
  }
  template <typename T>
  void set_param(int i, T v) {
    static_assert(sizeof(T) == sizeof(int32_t));
    std::memcpy(&op_params[i], &v, sizeof(T));
  }
};

// NumBytes() of `t` (a valid type) computed without overflow; nullopt when
// the span does not fit in int64_t. The one check of a tensor's byte size for
// shapes and strides that came from outside (the wire, a file, a builder's
// caller).
std::optional<size_t> CheckedNumBytes(const Tensor& t);

// Byte strides of a contiguous tensor of `type` and shape `ne`.
void ContiguousStrides(Type type, const int64_t ne[kMaxDims],
                       size_t nb[kMaxDims]);
bool SameShape(const Tensor& a, const Tensor& b);
// Whether `b` broadcasts to `a`: every a.ne[i] is a multiple of b.ne[i].
bool CanRepeat(const Tensor& b, const Tensor& a);
// "name f32 [4, 3, 1, 1]" for error messages and logs.
std::string Describe(const Tensor& t);

}  // namespace tessera

#endif  // TESSERA_GRAPH_TENSOR_H_
