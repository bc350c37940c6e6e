#include "graph/ops.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/op_types.h"

namespace tessera {
namespace {

// absl::StrCat takes absl::string_view, which is not std::string_view in
// every absl build.
std::string Str(std::string_view s) { return std::string(s); }
std::string TypeStr(Type t) { return Str(TypeName(t)); }
std::string Shape(const int64_t ne[kMaxDims]) {
  return absl::StrCat("[", absl::StrJoin(ne, ne + kMaxDims, ", "), "]");
}
std::string Shape(const Tensor& t) { return Shape(t.ne); }

template <typename... Args>
absl::Status Error(std::string_view op, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat("[", Str(op), "] ", args...));
}

bool IsQuantized(Type t) { return Traits(t).is_quantized; }

// `small` broadcasts to `big` along one dimension (both non-negative).
bool Divides(int64_t small, int64_t big) {
  return small == 0 ? big == 0 : big % small == 0;
}

// Checks an input tensor: present, a valid type, non-negative dimensions, ne[0]
// a whole number of blocks and an element count that fits in int64_t. Every
// builder runs this first, so later shape arithmetic cannot divide by a
// negative number or overflow.
absl::Status CheckInput(std::string_view op, std::string_view name,
                        const Tensor* t) {
  if (t == nullptr) return Error(op, Str(name), " is null");
  if (!IsValidType(static_cast<int32_t>(t->type))) {
    return Error(op, Str(name), " has invalid type ",
                 static_cast<int32_t>(t->type));
  }
  int64_t elements = 1;
  for (int i = 0; i < kMaxDims; ++i) {
    if (t->ne[i] < 0) {
      return Error(op, Str(name), " ", Describe(*t),
                   " has a negative dimension");
    }
    if (__builtin_mul_overflow(elements, t->ne[i], &elements)) {
      return Error(op, Str(name), " ", Describe(*t), " has too many elements");
    }
  }
  if (t->ne[0] % Traits(t->type).block_size != 0) {
    return Error(op, Str(name), " ", Describe(*t),
                 ": ne[0] is not a multiple of the block size");
  }
  return absl::OkStatus();
}

absl::Status CheckFloat(std::string_view op, std::string_view name,
                        const Tensor& t) {
  if (IsFloatType(t.type)) return absl::OkStatus();
  return Error(op, Str(name), " must be f32, f16 or bf16, got ",
               TypeStr(t.type));
}

absl::Status CheckType(std::string_view op, std::string_view name,
                       const Tensor& t, Type want) {
  if (t.type == want) return absl::OkStatus();
  return Error(op, Str(name), " must be ", TypeStr(want), ", got ",
               TypeStr(t.type));
}

// A new contiguous result of `type` and shape `ne` (overflow is reported
// under `op`'s name).
absl::StatusOr<Tensor*> NewResult(Context& ctx, std::string_view op, Type type,
                                  const int64_t ne[kMaxDims]) {
  absl::StatusOr<Tensor*> t =
      ctx.NewTensor(type, absl::Span<const int64_t>(ne, kMaxDims));
  if (!t.ok()) return Error(op, t.status().message());
  return t;
}

// A view of `a` with the given type, shape and strides, `offset` bytes into
// a. As in ggml, a view of a view points at the root with the summed offset.
Tensor* NewView(Context& ctx, Tensor* a, Type type, const int64_t ne[kMaxDims],
                const size_t nb[kMaxDims], size_t offset) {
  Tensor v;
  v.type = type;
  for (int i = 0; i < kMaxDims; ++i) {
    v.ne[i] = ne[i];
    v.nb[i] = nb[i];
  }
  if (a->view_src != nullptr) {
    v.view_src = a->view_src;
    v.view_offs = a->view_offs + offset;
  } else {
    v.view_src = a;
    v.view_offs = offset;
  }
  return ctx.NewTensorLike(v);
}

Tensor* Finish(Tensor* r, Op op, std::initializer_list<Tensor*> srcs) {
  r->op = op;
  int i = 0;
  for (Tensor* s : srcs) r->src[i++] = s;
  return r;
}

// ADD, SUB, MUL, DIV.
absl::StatusOr<Tensor*> Binary(Context& ctx, Op op, std::string_view name,
                               Tensor* a, Tensor* b) {
  if (auto s = CheckInput(name, "a", a); !s.ok()) return s;
  if (auto s = CheckInput(name, "b", b); !s.ok()) return s;
  if (auto s = CheckFloat(name, "a", *a); !s.ok()) return s;
  if (b->type != Type::kF32 && b->type != a->type) {
    return Error(name, "b must be f32 or a's type ", TypeStr(a->type), ", got ",
                 TypeStr(b->type));
  }
  if (!CanRepeat(*b, *a)) {
    return Error(name, "b ", Shape(*b), " does not broadcast to a ", Shape(*a));
  }
  absl::StatusOr<Tensor*> r = NewResult(ctx, name, a->type, a->ne);
  if (!r.ok()) return r;
  return Finish(*r, op, {a, b});
}

// Elementwise ops on one Float tensor with a result like it.
absl::StatusOr<Tensor*> FloatElementwise(Context& ctx, Op op,
                                         std::string_view name, Tensor* a) {
  if (auto s = CheckInput(name, "a", a); !s.ok()) return s;
  if (auto s = CheckFloat(name, "a", *a); !s.ok()) return s;
  absl::StatusOr<Tensor*> r = NewResult(ctx, name, a->type, a->ne);
  if (!r.ok()) return r;
  return Finish(*r, op, {a});
}

// `ne` (1 to 4 dimensions) as a full shape in `shape`, if it holds as
// many elements as `a` in whole blocks of a's type.
absl::Status ShapeOfSameElements(std::string_view op, const Tensor& a,
                                 absl::Span<const int64_t> ne,
                                 int64_t shape[kMaxDims]) {
  if (ne.empty() || ne.size() > kMaxDims) {
    return Error(op, "needs 1 to 4 dimensions, got ", ne.size());
  }
  std::fill(shape, shape + kMaxDims, 1);
  int64_t elements = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] < 0 || __builtin_mul_overflow(elements, ne[i], &elements)) {
      return Error(op, "invalid shape [", absl::StrJoin(ne, ", "), "]");
    }
    shape[i] = ne[i];
  }
  if (elements != a.NumElements()) {
    return Error(op, "a ", Shape(a), " has ", a.NumElements(),
                 " elements, shape [", absl::StrJoin(ne, ", "), "] has ",
                 elements);
  }
  if (shape[0] % Traits(a.type).block_size != 0) {
    return Error(op, "ne[0] = ", shape[0],
                 " is not a multiple of the block size of ", TypeStr(a.type));
  }
  return absl::OkStatus();
}

// DUP and CONT: a contiguous copy of `a` with a's type, in shape `ne`.
absl::StatusOr<Tensor*> Copy(Context& ctx, Op op, std::string_view name,
                             Tensor* a, absl::Span<const int64_t> ne) {
  if (auto s = CheckInput(name, "a", a); !s.ok()) return s;
  if (IsQuantized(a->type) && !a->HasContiguousRows()) {
    return Error(name, "quantized a ", Describe(*a),
                 " must have contiguous rows");
  }
  int64_t shape[kMaxDims];
  if (auto s = ShapeOfSameElements(name, *a, ne, shape); !s.ok()) return s;
  absl::StatusOr<Tensor*> r = NewResult(ctx, name, a->type, shape);
  if (!r.ok()) return r;
  return Finish(*r, op, {a});
}

// a's own shape, for a copy that keeps it (Copy refuses a null a first).
absl::Span<const int64_t> OwnShape(const Tensor* a) {
  if (a == nullptr) return {};
  return a->ne;
}

// SUM_ROWS and MEAN: F32 [n0, n1, n2, n3] -> F32 [1, n1, n2, n3].
absl::StatusOr<Tensor*> RowReduce(Context& ctx, Op op, std::string_view name,
                                  Tensor* a) {
  if (auto s = CheckInput(name, "a", a); !s.ok()) return s;
  if (auto s = CheckType(name, "a", *a, Type::kF32); !s.ok()) return s;
  const int64_t ne[kMaxDims] = {1, a->ne[1], a->ne[2], a->ne[3]};
  absl::StatusOr<Tensor*> r = NewResult(ctx, name, Type::kF32, ne);
  if (!r.ok()) return r;
  return Finish(*r, op, {a});
}

// NORM and RMS_NORM.
absl::StatusOr<Tensor*> RowNorm(Context& ctx, Op op, std::string_view name,
                                Tensor* a, float eps) {
  if (auto s = CheckInput(name, "a", a); !s.ok()) return s;
  if (auto s = CheckType(name, "a", *a, Type::kF32); !s.ok()) return s;
  if (!(eps >= 0.0f)) return Error(name, "eps must be >= 0, got ", eps);
  absl::StatusOr<Tensor*> r = NewResult(ctx, name, a->type, a->ne);
  if (!r.ok()) return r;
  (*r)->set_param<float>(0, eps);
  return Finish(*r, op, {a});
}

// An optional attention mask [n, >= rows, m2, m3] broadcast over dims 2 and
// 3 of `x` (SOFT_MAX and FLASH_ATTN_EXT).
absl::Status CheckMask(std::string_view op, const Tensor& mask, int64_t n,
                       int64_t rows, const Tensor& x, std::string_view x_name) {
  if (mask.type != Type::kF32 && mask.type != Type::kF16) {
    return Error(op, "mask must be f32 or f16, got ", TypeStr(mask.type));
  }
  if (mask.ne[0] != n || mask.ne[1] < rows) {
    return Error(op, "mask ", Shape(mask), " must be [", n, ", >= ", rows,
                 ", ...]");
  }
  if (!Divides(mask.ne[2], x.ne[2]) || !Divides(mask.ne[3], x.ne[3])) {
    return Error(op, "mask ", Shape(mask),
                 " does not broadcast over dims 2 "
                 "and 3 of ",
                 Str(x_name), " ", Shape(x));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor*> Dup(Context& ctx, Tensor* a) {
  return Copy(ctx, Op::kDup, "Dup", a, OwnShape(a));
}

absl::StatusOr<Tensor*> Cont(Context& ctx, Tensor* a) {
  return Copy(ctx, Op::kCont, "Cont", a, OwnShape(a));
}

absl::StatusOr<Tensor*> ContAs(Context& ctx, Tensor* a,
                               absl::Span<const int64_t> ne) {
  return Copy(ctx, Op::kCont, "Cont", a, ne);
}

absl::StatusOr<Tensor*> Cpy(Context& ctx, Tensor* a, Tensor* b) {
  constexpr std::string_view kOp = "Cpy";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (auto s = CheckInput(kOp, "b", b); !s.ok()) return s;
  if (a->NumElements() != b->NumElements()) {
    return Error(kOp, "a ", Shape(*a), " and b ", Shape(*b),
                 " differ in element count");
  }
  if (IsQuantized(a->type) && b->type != Type::kF32 && b->type != a->type) {
    return Error(kOp, "quantized a (", TypeStr(a->type),
                 ") can only be copied to f32 or its own type, not ",
                 TypeStr(b->type));
  }
  if (IsQuantized(b->type) && b->type != a->type) {
    if (!IsFloatType(a->type)) {
      return Error(kOp, "only f32, f16 or bf16 can be quantized to ",
                   TypeStr(b->type), ", got ", TypeStr(a->type));
    }
    if (a->ne[0] % Traits(b->type).block_size != 0) {
      return Error(kOp, "a's rows of ", a->ne[0],
                   " values are not whole blocks of ", TypeStr(b->type));
    }
  }
  Tensor* r = NewView(ctx, b, b->type, b->ne, b->nb, 0);
  return Finish(r, Op::kCpy, {a, b});
}

absl::StatusOr<Tensor*> Add(Context& ctx, Tensor* a, Tensor* b) {
  return Binary(ctx, Op::kAdd, "Add", a, b);
}
absl::StatusOr<Tensor*> Sub(Context& ctx, Tensor* a, Tensor* b) {
  return Binary(ctx, Op::kSub, "Sub", a, b);
}
absl::StatusOr<Tensor*> Mul(Context& ctx, Tensor* a, Tensor* b) {
  return Binary(ctx, Op::kMul, "Mul", a, b);
}
absl::StatusOr<Tensor*> Div(Context& ctx, Tensor* a, Tensor* b) {
  return Binary(ctx, Op::kDiv, "Div", a, b);
}

absl::StatusOr<Tensor*> Scale(Context& ctx, Tensor* a, float s, float bias) {
  absl::StatusOr<Tensor*> r = FloatElementwise(ctx, Op::kScale, "Scale", a);
  if (!r.ok()) return r;
  (*r)->set_param<float>(0, s);
  (*r)->set_param<float>(1, bias);
  return r;
}

absl::StatusOr<Tensor*> Sqr(Context& ctx, Tensor* a) {
  return FloatElementwise(ctx, Op::kSqr, "Sqr", a);
}
absl::StatusOr<Tensor*> Sqrt(Context& ctx, Tensor* a) {
  return FloatElementwise(ctx, Op::kSqrt, "Sqrt", a);
}
absl::StatusOr<Tensor*> Log(Context& ctx, Tensor* a) {
  return FloatElementwise(ctx, Op::kLog, "Log", a);
}

absl::StatusOr<Tensor*> SumRows(Context& ctx, Tensor* a) {
  return RowReduce(ctx, Op::kSumRows, "SumRows", a);
}
absl::StatusOr<Tensor*> Mean(Context& ctx, Tensor* a) {
  return RowReduce(ctx, Op::kMean, "Mean", a);
}

absl::StatusOr<Tensor*> Argmax(Context& ctx, Tensor* a) {
  constexpr std::string_view kOp = "Argmax";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (auto s = CheckType(kOp, "a", *a, Type::kF32); !s.ok()) return s;
  if (a->ne[2] != 1 || a->ne[3] != 1) {
    return Error(kOp, "a ", Shape(*a), " must be a matrix");
  }
  if (a->ne[0] > std::numeric_limits<int32_t>::max()) {
    return Error(kOp, "rows of ", a->ne[0], " values exceed int32 indices");
  }
  const int64_t ne[kMaxDims] = {a->ne[1], 1, 1, 1};
  absl::StatusOr<Tensor*> r = NewResult(ctx, kOp, Type::kI32, ne);
  if (!r.ok()) return r;
  return Finish(*r, Op::kArgmax, {a});
}

absl::StatusOr<Tensor*> Unary(Context& ctx, Tensor* a, UnaryOp op) {
  const int32_t v = static_cast<int32_t>(op);
  if (v < 0 || v >= kUnaryOpCount) return Error("Unary", "invalid op ", v);
  absl::StatusOr<Tensor*> r = FloatElementwise(
      ctx, Op::kUnary, absl::StrCat("Unary ", Str(UnaryOpName(op))), a);
  if (!r.ok()) return r;
  (*r)->op_params[0] = v;
  return r;
}

absl::StatusOr<Tensor*> Glu(Context& ctx, Tensor* a, Tensor* b, GluOp op) {
  if (b == nullptr) return GluSplit(ctx, a, op, false);
  const int32_t v = static_cast<int32_t>(op);
  if (v < 0 || v >= kGluOpCount) return Error("Glu", "invalid op ", v);
  const std::string name = absl::StrCat("Glu ", Str(GluOpName(op)));
  if (auto s = CheckInput(name, "a", a); !s.ok()) return s;
  if (auto s = CheckInput(name, "b", b); !s.ok()) return s;
  if (auto s = CheckFloat(name, "a", *a); !s.ok()) return s;
  if (b->type != a->type || !SameShape(*a, *b)) {
    return Error(name, "b ", Describe(*b), " must match a ", Describe(*a),
                 " in type and shape");
  }
  absl::StatusOr<Tensor*> r = NewResult(ctx, name, a->type, a->ne);
  if (!r.ok()) return r;
  (*r)->op_params[0] = v;
  return Finish(*r, Op::kGlu, {a, b});
}

absl::StatusOr<Tensor*> GluSplit(Context& ctx, Tensor* a, GluOp op,
                                 bool swapped) {
  const int32_t v = static_cast<int32_t>(op);
  if (v < 0 || v >= kGluOpCount) return Error("GluSplit", "invalid op ", v);
  const std::string name = absl::StrCat("GluSplit ", Str(GluOpName(op)));
  if (auto s = CheckInput(name, "a", a); !s.ok()) return s;
  if (auto s = CheckFloat(name, "a", *a); !s.ok()) return s;
  if (a->ne[0] % 2 != 0) {
    return Error(name, "a ", Shape(*a),
                 " has an odd ne[0]; it must split "
                 "in halves");
  }
  const int64_t ne[kMaxDims] = {a->ne[0] / 2, a->ne[1], a->ne[2], a->ne[3]};
  absl::StatusOr<Tensor*> r = NewResult(ctx, name, a->type, ne);
  if (!r.ok()) return r;
  (*r)->op_params[0] = v;
  (*r)->op_params[1] = swapped ? 1 : 0;
  return Finish(*r, Op::kGlu, {a, nullptr});
}

absl::StatusOr<Tensor*> Norm(Context& ctx, Tensor* a, float eps) {
  return RowNorm(ctx, Op::kNorm, "Norm", a, eps);
}
absl::StatusOr<Tensor*> RmsNorm(Context& ctx, Tensor* a, float eps) {
  return RowNorm(ctx, Op::kRmsNorm, "RmsNorm", a, eps);
}

absl::StatusOr<Tensor*> MulMat(Context& ctx, Tensor* a, Tensor* b) {
  constexpr std::string_view kOp = "MulMat";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (auto s = CheckInput(kOp, "b", b); !s.ok()) return s;
  if (auto s = CheckType(kOp, "b", *b, Type::kF32); !s.ok()) return s;
  if (!a->HasContiguousRows() || a->IsTransposed()) {
    return Error(kOp, "a ", Describe(*a),
                 " must have contiguous rows and not be transposed");
  }
  if (a->ne[0] != b->ne[0]) {
    return Error(kOp, "a ", Shape(*a), " and b ", Shape(*b),
                 " differ in ne[0]");
  }
  if (!Divides(a->ne[2], b->ne[2]) || !Divides(a->ne[3], b->ne[3])) {
    return Error(kOp, "a ", Shape(*a),
                 " does not broadcast over dims 2 and 3 "
                 "of b ",
                 Shape(*b));
  }
  const int64_t ne[kMaxDims] = {a->ne[1], b->ne[1], b->ne[2], b->ne[3]};
  absl::StatusOr<Tensor*> r = NewResult(ctx, kOp, Type::kF32, ne);
  if (!r.ok()) return r;
  return Finish(*r, Op::kMulMat, {a, b});
}

absl::StatusOr<Tensor*> GetRows(Context& ctx, Tensor* a, Tensor* b) {
  constexpr std::string_view kOp = "GetRows";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (auto s = CheckInput(kOp, "b", b); !s.ok()) return s;
  if (auto s = CheckType(kOp, "b", *b, Type::kI32); !s.ok()) return s;
  if (b->ne[1] != a->ne[2] || b->ne[2] != a->ne[3] || b->ne[3] != 1) {
    return Error(kOp, "indices b ", Shape(*b), " must be [n, ", a->ne[2], ", ",
                 a->ne[3], ", 1] for a ", Shape(*a));
  }
  const int64_t ne[kMaxDims] = {a->ne[0], b->ne[0], b->ne[1], b->ne[2]};
  const Type type = a->type == Type::kI32 ? Type::kI32 : Type::kF32;
  absl::StatusOr<Tensor*> r = NewResult(ctx, kOp, type, ne);
  if (!r.ok()) return r;
  return Finish(*r, Op::kGetRows, {a, b});
}

absl::StatusOr<Tensor*> SetRows(Context& ctx, Tensor* a, Tensor* b, Tensor* c) {
  constexpr std::string_view kOp = "SetRows";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (auto s = CheckInput(kOp, "b", b); !s.ok()) return s;
  if (auto s = CheckInput(kOp, "c", c); !s.ok()) return s;
  if (a->type == Type::kI32 || a->type == Type::kI64) {
    return Error(kOp, "a must be f32, f16, bf16 or quantized, got ",
                 TypeStr(a->type));
  }
  if (b->type != Type::kF32 && b->type != Type::kF16) {
    return Error(kOp, "b must be f32 or f16, got ", TypeStr(b->type));
  }
  if (c->type != Type::kI32 && c->type != Type::kI64) {
    return Error(kOp, "indices c must be i32 or i64, got ", TypeStr(c->type));
  }
  if (a->ne[0] != b->ne[0] || a->ne[2] != b->ne[2] || a->ne[3] != b->ne[3]) {
    return Error(kOp, "b ", Shape(*b), " must be [", a->ne[0], ", n, ",
                 a->ne[2], ", ", a->ne[3], "] for a ", Shape(*a));
  }
  if (c->ne[0] != b->ne[1] || c->ne[3] != 1 || !Divides(c->ne[1], b->ne[2]) ||
      !Divides(c->ne[2], b->ne[3])) {
    return Error(kOp, "indices c ", Shape(*c), " do not fit b ", Shape(*b),
                 ": need [", b->ne[1],
                 ", c1, c2, 1] with b2 % c1 == 0 and "
                 "b3 % c2 == 0");
  }
  if (!a->HasContiguousRows() || !b->HasContiguousRows()) {
    return Error(kOp, "a and b must have contiguous rows");
  }
  Tensor* r = NewView(ctx, a, a->type, a->ne, a->nb, 0);
  return Finish(r, Op::kSetRows, {b, c});
}

absl::StatusOr<Tensor*> View(Context& ctx, Tensor* a,
                             absl::Span<const int64_t> ne,
                             absl::Span<const size_t> nb, size_t offset) {
  constexpr std::string_view kOp = "View";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (ne.empty() || ne.size() > kMaxDims) {
    return Error(kOp, "needs 1 to 4 dimensions, got ", ne.size());
  }
  if (nb.size() != ne.size() - 1) {
    return Error(kOp, ne.size(), " dimensions need ", ne.size() - 1,
                 " strides (nb[1..]), got ", nb.size());
  }
  Tensor v;
  v.type = a->type;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] < 0) return Error(kOp, "negative dimension ", ne[i]);
    v.ne[i] = ne[i];
  }
  const TypeTraits& traits = Traits(a->type);
  if (v.ne[0] % traits.block_size != 0) {
    return Error(kOp, "ne[0] = ", v.ne[0],
                 " is not a multiple of the block "
                 "size of ",
                 TypeStr(a->type));
  }
  v.nb[0] = traits.type_size;
  for (int i = 1; i < kMaxDims; ++i) {
    if (static_cast<size_t>(i) < ne.size()) {
      v.nb[i] = nb[i - 1];
    } else if (__builtin_mul_overflow(
                   v.nb[i - 1], static_cast<size_t>(v.ne[i - 1]), &v.nb[i])) {
      return Error(kOp, "strides overflow");
    }
  }
  const std::optional<size_t> bytes = CheckedNumBytes(v);
  const size_t a_bytes = a->NumBytes();
  if (!bytes.has_value() || offset > a_bytes || *bytes > a_bytes - offset) {
    return Error(kOp, "view ", Shape(v), " at offset ", offset,
                 " does not lie inside a ", Describe(*a), " of ", a_bytes,
                 " bytes");
  }
  size_t root_offset;  // NewView's offset into a's root
  if (__builtin_add_overflow(a->view_src != nullptr ? a->view_offs : 0, offset,
                             &root_offset)) {
    return Error(kOp, "offset overflows");
  }
  Tensor* r = NewView(ctx, a, a->type, v.ne, v.nb, offset);
  const uint64_t off = offset;
  r->op_params[0] = static_cast<int32_t>(static_cast<uint32_t>(off));
  r->op_params[1] = static_cast<int32_t>(static_cast<uint32_t>(off >> 32));
  return Finish(r, Op::kView, {a});
}

absl::StatusOr<Tensor*> Reshape(Context& ctx, Tensor* a,
                                absl::Span<const int64_t> ne) {
  constexpr std::string_view kOp = "Reshape";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (!a->IsContiguous()) {
    return Error(kOp, "a ", Describe(*a), " must be contiguous");
  }
  int64_t shape[kMaxDims];
  if (auto s = ShapeOfSameElements(kOp, *a, ne, shape); !s.ok()) return s;
  size_t nb[kMaxDims];
  ContiguousStrides(a->type, shape, nb);
  Tensor* r = NewView(ctx, a, a->type, shape, nb, 0);
  return Finish(r, Op::kReshape, {a});
}

absl::StatusOr<Tensor*> Permute(Context& ctx, Tensor* a, int axis0, int axis1,
                                int axis2, int axis3) {
  constexpr std::string_view kOp = "Permute";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  const int axes[kMaxDims] = {axis0, axis1, axis2, axis3};
  bool seen[kMaxDims] = {};
  for (int ax : axes) {
    if (ax < 0 || ax >= kMaxDims || seen[ax]) {
      return Error(kOp, "axes (", absl::StrJoin(axes, ", "),
                   ") are not a permutation of 0..3");
    }
    seen[ax] = true;
  }
  if (IsQuantized(a->type) && axis0 != 0) {
    return Error(kOp, "quantized a ", Describe(*a), " must keep axis 0");
  }
  int64_t ne[kMaxDims];
  size_t nb[kMaxDims];
  for (int i = 0; i < kMaxDims; ++i) {
    ne[axes[i]] = a->ne[i];
    nb[axes[i]] = a->nb[i];
  }
  Tensor* r = NewView(ctx, a, a->type, ne, nb, 0);
  for (int i = 0; i < kMaxDims; ++i) r->op_params[i] = axes[i];
  return Finish(r, Op::kPermute, {a});
}

absl::StatusOr<Tensor*> Transpose(Context& ctx, Tensor* a) {
  constexpr std::string_view kOp = "Transpose";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (IsQuantized(a->type)) {
    return Error(kOp, "quantized a ", Describe(*a), " cannot be transposed");
  }
  const int64_t ne[kMaxDims] = {a->ne[1], a->ne[0], a->ne[2], a->ne[3]};
  const size_t nb[kMaxDims] = {a->nb[1], a->nb[0], a->nb[2], a->nb[3]};
  Tensor* r = NewView(ctx, a, a->type, ne, nb, 0);
  const int32_t axes[kMaxDims] = {1, 0, 2, 3};
  for (int i = 0; i < kMaxDims; ++i) r->op_params[i] = axes[i];
  return Finish(r, Op::kTranspose, {a});
}

absl::StatusOr<Tensor*> SoftMax(Context& ctx, Tensor* a, Tensor* mask,
                                float scale, float max_bias) {
  constexpr std::string_view kOp = "SoftMax";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (auto s = CheckType(kOp, "a", *a, Type::kF32); !s.ok()) return s;
  if (mask != nullptr) {
    if (auto s = CheckInput(kOp, "mask", mask); !s.ok()) return s;
    if (auto s = CheckMask(kOp, *mask, a->ne[0], a->ne[1], *a, "a"); !s.ok()) {
      return s;
    }
  } else if (max_bias > 0.0f) {
    return Error(kOp, "max_bias > 0 (ALiBi) needs a mask");
  }
  absl::StatusOr<Tensor*> r = NewResult(ctx, kOp, a->type, a->ne);
  if (!r.ok()) return r;
  (*r)->set_param<float>(0, scale);
  (*r)->set_param<float>(1, max_bias);
  return Finish(*r, Op::kSoftMax, {a, mask});
}

absl::StatusOr<Tensor*> Rope(Context& ctx, Tensor* a, Tensor* pos,
                             const RopeParams& params, Tensor* freq_factors) {
  constexpr std::string_view kOp = "Rope";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (auto s = CheckInput(kOp, "pos", pos); !s.ok()) return s;
  if (a->type != Type::kF32 && a->type != Type::kF16) {
    return Error(kOp, "a must be f32 or f16, got ", TypeStr(a->type));
  }
  if (auto s = CheckType(kOp, "pos", *pos, Type::kI32); !s.ok()) return s;
  if (pos->ne[0] != a->ne[2] || pos->ne[1] != 1 || pos->ne[2] != 1 ||
      pos->ne[3] != 1) {
    return Error(kOp, "pos ", Shape(*pos), " must be [", a->ne[2],
                 "] (one position per token)");
  }
  if (params.n_dims <= 0 || params.n_dims % 2 != 0 ||
      params.n_dims > a->ne[0]) {
    return Error(kOp, "n_dims = ", params.n_dims,
                 " must be even, > 0 and <= "
                 "head_dim ",
                 a->ne[0]);
  }
  if (params.mode != kRopeNormal && params.mode != kRopeNeox) {
    return Error(kOp, "mode ", params.mode,
                 " is neither normal (0) nor "
                 "NeoX (2)");
  }
  if (freq_factors != nullptr) {
    if (auto s = CheckInput(kOp, "freq_factors", freq_factors); !s.ok()) {
      return s;
    }
    if (auto s = CheckType(kOp, "freq_factors", *freq_factors, Type::kF32);
        !s.ok()) {
      return s;
    }
    if (freq_factors->ne[0] < params.n_dims / 2 || freq_factors->ne[1] != 1 ||
        freq_factors->ne[2] != 1 || freq_factors->ne[3] != 1) {
      return Error(kOp, "freq_factors ", Shape(*freq_factors), " must be [>= ",
                   params.n_dims / 2, "] (one factor per rotated pair)");
    }
  }
  absl::StatusOr<Tensor*> r = NewResult(ctx, kOp, a->type, a->ne);
  if (!r.ok()) return r;
  Tensor* t = *r;
  t->op_params[1] = params.n_dims;
  t->op_params[2] = params.mode;
  t->op_params[4] = params.n_ctx_orig;
  t->set_param<float>(5, params.freq_base);
  t->set_param<float>(6, params.freq_scale);
  t->set_param<float>(7, params.ext_factor);
  t->set_param<float>(8, params.attn_factor);
  t->set_param<float>(9, params.beta_fast);
  t->set_param<float>(10, params.beta_slow);
  return Finish(t, Op::kRope, {a, pos, freq_factors});
}

absl::StatusOr<Tensor*> Concat(Context& ctx, Tensor* a, Tensor* b, int dim) {
  constexpr std::string_view kOp = "Concat";
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (auto s = CheckInput(kOp, "b", b); !s.ok()) return s;
  if (dim < 0 || dim >= kMaxDims) return Error(kOp, "invalid dim ", dim);
  if (a->type != b->type || IsQuantized(a->type)) {
    return Error(kOp, "a and b must have the same non-quantized type, got ",
                 TypeStr(a->type), " and ", TypeStr(b->type));
  }
  int64_t ne[kMaxDims];
  for (int i = 0; i < kMaxDims; ++i) {
    if (i == dim) {
      ne[i] = a->ne[i] + b->ne[i];  // both non-negative: no overflow
    } else if (a->ne[i] != b->ne[i]) {
      return Error(kOp, "a ", Shape(*a), " and b ", Shape(*b),
                   " differ outside dim ", dim);
    } else {
      ne[i] = a->ne[i];
    }
  }
  absl::StatusOr<Tensor*> r = NewResult(ctx, kOp, a->type, ne);
  if (!r.ok()) return r;
  (*r)->op_params[0] = dim;
  return Finish(*r, Op::kConcat, {a, b});
}

absl::StatusOr<Tensor*> Argsort(Context& ctx, Tensor* a, SortOrder order) {
  constexpr std::string_view kOp = "Argsort";
  const int32_t v = static_cast<int32_t>(order);
  if (order != SortOrder::kAscending && order != SortOrder::kDescending) {
    return Error(kOp, "invalid order ", v);
  }
  if (auto s = CheckInput(kOp, "a", a); !s.ok()) return s;
  if (auto s = CheckType(kOp, "a", *a, Type::kF32); !s.ok()) return s;
  if (a->ne[0] > std::numeric_limits<int32_t>::max()) {
    return Error(kOp, "rows of ", a->ne[0], " values exceed int32 indices");
  }
  absl::StatusOr<Tensor*> r = NewResult(ctx, kOp, Type::kI32, a->ne);
  if (!r.ok()) return r;
  (*r)->op_params[0] = v;
  return Finish(*r, Op::kArgsort, {a});
}

absl::StatusOr<Tensor*> FlashAttnExt(Context& ctx, Tensor* q, Tensor* k,
                                     Tensor* v, Tensor* mask, float scale,
                                     float max_bias, float logit_softcap) {
  constexpr std::string_view kOp = "FlashAttnExt";
  if (auto s = CheckInput(kOp, "q", q); !s.ok()) return s;
  if (auto s = CheckInput(kOp, "k", k); !s.ok()) return s;
  if (auto s = CheckInput(kOp, "v", v); !s.ok()) return s;
  if (auto s = CheckType(kOp, "q", *q, Type::kF32); !s.ok()) return s;
  for (const Tensor* t : {k, v}) {
    if (!IsAttnKvType(t->type)) {
      return Error(kOp, t == k ? "k" : "v", " must be ", kAttnKvTypeNames,
                   ", got ", TypeStr(t->type));
    }
  }
  if (k->ne[0] != q->ne[0]) {
    return Error(kOp, "k ", Shape(*k), " and q ", Shape(*q),
                 " differ in head size ne[0]");
  }
  if (v->ne[1] != k->ne[1] || v->ne[2] != k->ne[2] || v->ne[3] != k->ne[3]) {
    return Error(kOp, "v ", Shape(*v), " must match k ", Shape(*k),
                 " in dims 1..3");
  }
  if (!Divides(k->ne[2], q->ne[2]) || k->ne[3] != q->ne[3]) {
    return Error(kOp, "k ", Shape(*k),
                 " must have a number of heads that "
                 "divides q's and q's batch: q ",
                 Shape(*q));
  }
  if (mask != nullptr) {
    if (auto s = CheckInput(kOp, "mask", mask); !s.ok()) return s;
    if (auto s = CheckMask(kOp, *mask, k->ne[1], q->ne[1], *q, "q"); !s.ok()) {
      return s;
    }
  } else if (max_bias > 0.0f) {
    return Error(kOp, "max_bias > 0 (ALiBi) needs a mask");
  }
  const int64_t ne[kMaxDims] = {v->ne[0], q->ne[2], q->ne[1], q->ne[3]};
  absl::StatusOr<Tensor*> r = NewResult(ctx, kOp, Type::kF32, ne);
  if (!r.ok()) return r;
  (*r)->set_param<float>(0, scale);
  (*r)->set_param<float>(1, max_bias);
  (*r)->set_param<float>(2, logit_softcap);
  return Finish(*r, Op::kFlashAttnExt, {q, k, v, mask});
}

namespace {

// Runs the builder of `node.op` on node's sources and op_params in `ctx`.
absl::StatusOr<Tensor*> Rebuild(Context& ctx, const Tensor& node) {
  Tensor* const* s = node.src;
  const int32_t* p = node.op_params;
  switch (node.op) {
    case Op::kNone:
      break;
    case Op::kDup:
      return Dup(ctx, s[0]);
    case Op::kCpy:
      return Cpy(ctx, s[0], s[1]);
    case Op::kCont:
      return ContAs(ctx, s[0], node.ne);
    case Op::kAdd:
      return Add(ctx, s[0], s[1]);
    case Op::kSub:
      return Sub(ctx, s[0], s[1]);
    case Op::kMul:
      return Mul(ctx, s[0], s[1]);
    case Op::kDiv:
      return Div(ctx, s[0], s[1]);
    case Op::kScale:
      return Scale(ctx, s[0], node.param<float>(0), node.param<float>(1));
    case Op::kSqr:
      return Sqr(ctx, s[0]);
    case Op::kSqrt:
      return Sqrt(ctx, s[0]);
    case Op::kLog:
      return Log(ctx, s[0]);
    case Op::kSumRows:
      return SumRows(ctx, s[0]);
    case Op::kMean:
      return Mean(ctx, s[0]);
    case Op::kArgmax:
      return Argmax(ctx, s[0]);
    case Op::kUnary:
      return Unary(ctx, s[0], static_cast<UnaryOp>(p[0]));
    case Op::kGlu:
      if (s[1] != nullptr) {
        return Glu(ctx, s[0], s[1], static_cast<GluOp>(p[0]));
      }
      return GluSplit(ctx, s[0], static_cast<GluOp>(p[0]), p[1] != 0);
    case Op::kNorm:
      return Norm(ctx, s[0], node.param<float>(0));
    case Op::kRmsNorm:
      return RmsNorm(ctx, s[0], node.param<float>(0));
    case Op::kMulMat:
      return MulMat(ctx, s[0], s[1]);
    case Op::kGetRows:
      return GetRows(ctx, s[0], s[1]);
    case Op::kSetRows: {
      // The destination is only reachable as the view source: stand in a
      // tensor with the node's own type, shape, strides and view.
      if (node.view_src == nullptr) {
        return Error("SetRows", "result is not a view of its destination");
      }
      Tensor dst;
      dst.type = node.type;
      std::memcpy(dst.ne, node.ne, sizeof(dst.ne));
      std::memcpy(dst.nb, node.nb, sizeof(dst.nb));
      dst.view_src = node.view_src;
      dst.view_offs = node.view_offs;
      return SetRows(ctx, ctx.NewTensorLike(dst), s[0], s[1]);
    }
    case Op::kView: {
      const uint64_t offset =
          static_cast<uint64_t>(static_cast<uint32_t>(p[0])) |
          (static_cast<uint64_t>(static_cast<uint32_t>(p[1])) << 32);
      return View(ctx, s[0], node.ne, {node.nb[1], node.nb[2], node.nb[3]},
                  static_cast<size_t>(offset));
    }
    case Op::kReshape:
      return Reshape(ctx, s[0], node.ne);
    case Op::kPermute:
      return Permute(ctx, s[0], p[0], p[1], p[2], p[3]);
    case Op::kTranspose:
      return Transpose(ctx, s[0]);
    case Op::kSoftMax:
      return SoftMax(ctx, s[0], s[1], node.param<float>(0),
                     node.param<float>(1));
    case Op::kRope: {
      RopeParams rp;
      rp.n_dims = p[1];
      rp.mode = p[2];
      rp.n_ctx_orig = p[4];
      rp.freq_base = node.param<float>(5);
      rp.freq_scale = node.param<float>(6);
      rp.ext_factor = node.param<float>(7);
      rp.attn_factor = node.param<float>(8);
      rp.beta_fast = node.param<float>(9);
      rp.beta_slow = node.param<float>(10);
      return Rope(ctx, s[0], s[1], rp, s[2]);
    }
    case Op::kConcat:
      return Concat(ctx, s[0], s[1], p[0]);
    case Op::kArgsort:
      return Argsort(ctx, s[0], static_cast<SortOrder>(p[0]));
    case Op::kFlashAttnExt:
      return FlashAttnExt(ctx, s[0], s[1], s[2], s[3], node.param<float>(0),
                          node.param<float>(1), node.param<float>(2));
  }
  return Error("ValidateNode", "invalid op ", static_cast<int32_t>(node.op));
}

std::string Strides(const size_t nb[kMaxDims]) {
  return absl::StrCat("[", absl::StrJoin(nb, nb + kMaxDims, ", "), "]");
}

}  // namespace

// 1. The node's op and type must be valid and its shape sane.
// 2. A view must point at a root tensor and lie inside it.
// 3. A NONE node (a leaf) must have no sources; nothing else is derived.
// 4. Otherwise the op's builder runs on the node's sources and op_params in
//    a scratch Context, and its result must equal the node in type, shape,
//    strides, op_params, sources and view.
absl::Status ValidateNode(const Tensor& node) {
  const int32_t op = static_cast<int32_t>(node.op);
  auto fail = [&node](const auto&... args) {
    return absl::InvalidArgumentError(
        absl::StrCat("[ValidateNode] ", Describe(node), " (",
                     Str(OpName(node.op)), "): ", args...));
  };
  if (op < 0 || op >= kOpCount) return fail("invalid op ", op);
  if (absl::Status s = CheckInput(
          absl::StrCat("ValidateNode ", Str(OpName(node.op))), "node", &node);
      !s.ok()) {
    return s;
  }
  if (node.view_src != nullptr) {
    if (node.view_src->view_src != nullptr) {
      return fail("view source ", Describe(*node.view_src),
                  " is itself a view");
    }
    const std::optional<size_t> bytes = CheckedNumBytes(node);
    const size_t src_bytes = node.view_src->NumBytes();
    if (!bytes.has_value() || node.view_offs > src_bytes ||
        *bytes > src_bytes - node.view_offs) {
      return fail("view at offset ", node.view_offs,
                  " does not lie inside its source ", Describe(*node.view_src));
    }
  }
  if (node.op == Op::kNone) {
    for (const Tensor* s : node.src) {
      if (s != nullptr) return fail("a leaf has sources");
    }
    return absl::OkStatus();
  }

  Context scratch;
  absl::StatusOr<Tensor*> built = Rebuild(scratch, node);
  if (!built.ok()) return fail(built.status().message());
  const Tensor& want = **built;
  if (node.type != want.type) {
    return fail("type ", TypeStr(node.type), ", expected ", TypeStr(want.type));
  }
  if (!SameShape(node, want)) {
    return fail("shape ", Shape(node), ", expected ", Shape(want));
  }
  if (std::memcmp(node.nb, want.nb, sizeof(node.nb)) != 0) {
    return fail("strides ", Strides(node.nb), ", expected ", Strides(want.nb));
  }
  for (int i = 0; i < kMaxOpParams; ++i) {
    if (node.op_params[i] != want.op_params[i]) {
      return fail("op_params[", i, "] = ", node.op_params[i], ", expected ",
                  want.op_params[i]);
    }
  }
  for (int i = 0; i < kMaxSrc; ++i) {
    if (node.src[i] != want.src[i]) {
      return fail("src[", i, "] is ",
                  node.src[i] ? Describe(*node.src[i]) : "null", ", expected ",
                  want.src[i] ? Describe(*want.src[i]) : "null");
    }
  }
  if (node.view_src != want.view_src || node.view_offs != want.view_offs) {
    return fail("view (", node.view_src ? Describe(*node.view_src) : "none",
                " + ", node.view_offs, "), expected (",
                want.view_src ? Describe(*want.view_src) : "none", " + ",
                want.view_offs, ")");
  }
  return absl::OkStatus();
}

}  // namespace tessera
