#include "graph/node_checks.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "graph/graph.h"
#include "graph/op_types.h"
#include "graph/type.h"

namespace tessera {
namespace {

// The checks of one node, one method per op family; every message starts
// with `where`.
class NodeChecker {
 public:
  // `need_data`: operands that are not empty must have data.
  NodeChecker(const Tensor& node, std::string_view where, OperandLimits limits,
              bool need_data)
      : node_(node),
        where_(where.data(), where.size()),
        limits_(limits),
        need_data_(need_data) {}

  // DUP, CPY, CONT.
  absl::Status Copy() const;
  // ADD, SUB, MUL, DIV.
  absl::Status Binary() const;
  // SCALE, SQR, SQRT, LOG, UNARY.
  absl::Status UnaryLike() const;
  absl::Status Glu() const;
  // SUM_ROWS, MEAN.
  absl::Status SumRows() const;
  absl::Status Argmax() const;
  // NORM, RMS_NORM.
  absl::Status Norm() const;
  absl::Status Argsort() const;
  absl::Status MulMat() const;
  absl::Status GetRows() const;
  absl::Status SetRows() const;
  absl::Status SoftMax() const;
  absl::Status Rope() const;
  absl::Status Concat() const;
  absl::Status FlashAttnExt() const;

  template <typename... Args>
  absl::Status Invalid(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, args...));
  }

 private:
  // Step 1 of CheckNode for `t` as operand `role`.
  absl::Status Operand(const Tensor* t, const char* role) const;
  // Checks that `t` has type `type`.
  absl::Status TypeIs(const Tensor& t, const char* role, Type type) const;
  // Checks that `t` has a float type (F32, F16, BF16).
  absl::Status FloatTypeIs(const Tensor& t, const char* role) const;
  // Checks that `t` is F32 or F16.
  absl::Status IsF32OrF16(const Tensor& t, const char* role) const;
  // Checks that `t` has exactly shape `ne`.
  absl::Status ShapeIs(const Tensor& t, const char* role,
                       const int64_t ne[kMaxDims]) const;
  // Checks that every dimension of `b` is positive and divides `a`'s.
  absl::Status Broadcast(const Tensor& b, const char* b_role, const Tensor& a,
                         const char* a_role) const;
  // Checks an attention mask: F32 or F16, [n0, >= n1, m2, m3] with
  // n2 % m2 == 0 and n3 % m3 == 0.
  absl::Status Mask(const Tensor& mask, int64_t n0, int64_t n1, int64_t n2,
                    int64_t n3) const;
  // The operand checks of the node ("dst") and src[0] (`role`), then that
  // src[0] has type `src_type` and the node `dst_type`.
  absl::Status RowOp(const char* role, Type src_type, Type dst_type) const;
  // The operand checks of the node and src[0] ("a"), then that a has a float
  // type and the node a's type and shape.
  absl::Status SameAsSource() const;

  const Tensor& node_;
  const absl::string_view where_;
  const OperandLimits limits_;
  const bool need_data_;
};

absl::Status NodeChecker::Operand(const Tensor* t, const char* role) const {
  if (t == nullptr) return Invalid("missing operand ", role);
  if (!IsValidType(static_cast<int32_t>(t->type))) {
    return Invalid(role, " has invalid type ", static_cast<int32_t>(t->type));
  }
  for (int i = 0; i < kMaxDims; ++i) {
    if (t->ne[i] < 0) {
      return Invalid(role, " has negative dimension ", i, ": ", t->ne[i]);
    }
  }
  const TypeTraits& traits = Traits(t->type);
  if (t->ne[0] % traits.block_size != 0) {
    return Invalid(role, " ", Describe(*t), " has ne[0] not a multiple ",
                   "of the block size ", traits.block_size);
  }
  if (traits.is_quantized && t->nb[0] != traits.type_size) {
    return Invalid(role, " ", Describe(*t),
                   " has non-contiguous quantized blocks (nb[0] = ", t->nb[0],
                   ")");
  }
  if (need_data_ && t->data == nullptr && !t->IsEmpty()) {
    return Invalid(role, " ", Describe(*t), " has no data");
  }
  return limits_(*t, role);
}

absl::Status NodeChecker::TypeIs(const Tensor& t, const char* role,
                                 Type type) const {
  if (t.type == type) return absl::OkStatus();
  return Invalid(role, " ", Describe(t), " must be ",
                 std::string(TypeName(type)));
}

absl::Status NodeChecker::FloatTypeIs(const Tensor& t, const char* role) const {
  if (IsFloatType(t.type)) return absl::OkStatus();
  return Invalid(role, " ", Describe(t), " must be f32, f16 or bf16");
}

absl::Status NodeChecker::IsF32OrF16(const Tensor& t, const char* role) const {
  if (t.type == Type::kF32 || t.type == Type::kF16) return absl::OkStatus();
  return Invalid(role, " ", Describe(t), " must be f32 or f16");
}

absl::Status NodeChecker::ShapeIs(const Tensor& t, const char* role,
                                  const int64_t ne[kMaxDims]) const {
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.ne[i] != ne[i]) {
      return Invalid(role, " ", Describe(t), " must have shape [", ne[0], ", ",
                     ne[1], ", ", ne[2], ", ", ne[3], "]");
    }
  }
  return absl::OkStatus();
}

absl::Status NodeChecker::Broadcast(const Tensor& b, const char* b_role,
                                    const Tensor& a, const char* a_role) const {
  for (int i = 0; i < kMaxDims; ++i) {
    if (b.ne[i] <= 0 || a.ne[i] % b.ne[i] != 0) {
      return Invalid(b_role, " ", Describe(b), " does not broadcast to ",
                     a_role, " ", Describe(a));
    }
  }
  return absl::OkStatus();
}

absl::Status NodeChecker::Mask(const Tensor& mask, int64_t n0, int64_t n1,
                               int64_t n2, int64_t n3) const {
  TESSERA_RETURN_IF_ERROR(Operand(&mask, "mask"));
  TESSERA_RETURN_IF_ERROR(IsF32OrF16(mask, "mask"));
  if (mask.ne[0] != n0 || mask.ne[1] < n1 || mask.ne[2] <= 0 ||
      mask.ne[3] <= 0 || n2 % mask.ne[2] != 0 || n3 % mask.ne[3] != 0) {
    return Invalid("mask ", Describe(mask), " does not fit [", n0, ", >= ", n1,
                   ", ", n2, ", ", n3, "]");
  }
  return absl::OkStatus();
}

absl::Status NodeChecker::RowOp(const char* role, Type src_type,
                                Type dst_type) const {
  TESSERA_RETURN_IF_ERROR(Operand(&node_, "dst"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[0], role));
  TESSERA_RETURN_IF_ERROR(TypeIs(*node_.src[0], role, src_type));
  return TypeIs(node_, "dst", dst_type);
}

absl::Status NodeChecker::SameAsSource() const {
  TESSERA_RETURN_IF_ERROR(Operand(&node_, "dst"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[0], "a"));
  const Tensor& a = *node_.src[0];
  TESSERA_RETURN_IF_ERROR(FloatTypeIs(a, "a"));
  TESSERA_RETURN_IF_ERROR(TypeIs(node_, "dst", a.type));
  return ShapeIs(node_, "dst", a.ne);
}

absl::Status NodeChecker::Copy() const {
  TESSERA_RETURN_IF_ERROR(Operand(&node_, "dst"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[0], "src"));
  const Tensor& src = *node_.src[0];
  if (node_.op != Op::kCpy && src.type != node_.type) {
    return Invalid("dst ", Describe(node_), " must have the type of src ",
                   Describe(src));
  }
  if (Traits(src.type).is_quantized && src.type != node_.type &&
      node_.type != Type::kF32) {
    return Invalid("quantized src ", Describe(src),
                   " converts only to f32, not to ", Describe(node_));
  }
  if (src.NumElements() != node_.NumElements()) {
    return Invalid("src ", Describe(src), " and dst ", Describe(node_),
                   " differ in element count");
  }
  return absl::OkStatus();
}

absl::Status NodeChecker::Binary() const {
  TESSERA_RETURN_IF_ERROR(SameAsSource());
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[1], "b"));
  const Tensor& a = *node_.src[0];
  const Tensor& b = *node_.src[1];
  if (b.type != Type::kF32 && b.type != a.type) {
    return Invalid("b ", Describe(b), " must be f32 or the type of a ",
                   Describe(a));
  }
  if (node_.IsEmpty()) return absl::OkStatus();
  return Broadcast(b, "b", a, "a");
}

absl::Status NodeChecker::UnaryLike() const {
  TESSERA_RETURN_IF_ERROR(SameAsSource());
  const int32_t unary = node_.op_params[0];
  if (node_.op == Op::kUnary && (unary < 0 || unary >= kUnaryOpCount)) {
    return Invalid("unknown unary op ", unary);
  }
  return absl::OkStatus();
}

absl::Status NodeChecker::Glu() const {
  TESSERA_RETURN_IF_ERROR(Operand(&node_, "dst"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[0], "a"));
  const Tensor& a = *node_.src[0];
  const Tensor* b = node_.src[1];
  TESSERA_RETURN_IF_ERROR(FloatTypeIs(a, "a"));
  TESSERA_RETURN_IF_ERROR(TypeIs(node_, "dst", a.type));
  const int32_t glu = node_.op_params[0];
  const int32_t swapped = node_.op_params[1];
  if (glu < 0 || glu >= kGluOpCount) return Invalid("unknown glu op ", glu);
  if (swapped != 0 && swapped != 1) {
    return Invalid("swapped must be 0 or 1, not ", swapped);
  }
  if (b != nullptr) {
    TESSERA_RETURN_IF_ERROR(Operand(b, "b"));
    TESSERA_RETURN_IF_ERROR(TypeIs(*b, "b", a.type));
    TESSERA_RETURN_IF_ERROR(ShapeIs(*b, "b", a.ne));
    return ShapeIs(node_, "dst", a.ne);
  }
  if (a.ne[0] % 2 != 0) {
    return Invalid("a ", Describe(a), " has an odd row length");
  }
  const int64_t ne[kMaxDims] = {a.ne[0] / 2, a.ne[1], a.ne[2], a.ne[3]};
  return ShapeIs(node_, "dst", ne);
}

absl::Status NodeChecker::SumRows() const {
  TESSERA_RETURN_IF_ERROR(RowOp("a", Type::kF32, Type::kF32));
  const Tensor& a = *node_.src[0];
  const int64_t ne[kMaxDims] = {1, a.ne[1], a.ne[2], a.ne[3]};
  return ShapeIs(node_, "dst", ne);
}

absl::Status NodeChecker::Argmax() const {
  TESSERA_RETURN_IF_ERROR(RowOp("a", Type::kF32, Type::kI32));
  const Tensor& a = *node_.src[0];
  if (a.ne[2] != 1 || a.ne[3] != 1) {
    return Invalid("a ", Describe(a), " must be a matrix");
  }
  const int64_t ne[kMaxDims] = {a.ne[1], 1, 1, 1};
  return ShapeIs(node_, "dst", ne);
}

absl::Status NodeChecker::Norm() const {
  TESSERA_RETURN_IF_ERROR(RowOp("a", Type::kF32, Type::kF32));
  TESSERA_RETURN_IF_ERROR(ShapeIs(node_, "dst", node_.src[0]->ne));
  const float eps = node_.param<float>(0);
  if (!(eps >= 0.0f)) return Invalid("eps ", eps, " must be >= 0");
  return absl::OkStatus();
}

absl::Status NodeChecker::Argsort() const {
  TESSERA_RETURN_IF_ERROR(RowOp("a", Type::kF32, Type::kI32));
  TESSERA_RETURN_IF_ERROR(ShapeIs(node_, "dst", node_.src[0]->ne));
  const int32_t order = node_.op_params[0];
  if (order != static_cast<int32_t>(SortOrder::kAscending) &&
      order != static_cast<int32_t>(SortOrder::kDescending)) {
    return Invalid("unknown sort order ", order);
  }
  return absl::OkStatus();
}

absl::Status NodeChecker::MulMat() const {
  TESSERA_RETURN_IF_ERROR(Operand(&node_, "dst"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[0], "a"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[1], "b"));
  const Tensor& a = *node_.src[0];
  const Tensor& b = *node_.src[1];
  TESSERA_RETURN_IF_ERROR(TypeIs(b, "b", Type::kF32));
  TESSERA_RETURN_IF_ERROR(TypeIs(node_, "dst", Type::kF32));
  if (a.ne[0] != b.ne[0] || a.ne[2] <= 0 || a.ne[3] <= 0 ||
      b.ne[2] % a.ne[2] != 0 || b.ne[3] % a.ne[3] != 0) {
    return Invalid("a ", Describe(a), " and b ", Describe(b),
                   " do not multiply");
  }
  const int64_t ne[kMaxDims] = {a.ne[1], b.ne[1], b.ne[2], b.ne[3]};
  return ShapeIs(node_, "dst", ne);
}

absl::Status NodeChecker::GetRows() const {
  TESSERA_RETURN_IF_ERROR(Operand(&node_, "dst"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[0], "a"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[1], "b"));
  const Tensor& a = *node_.src[0];
  const Tensor& b = *node_.src[1];
  TESSERA_RETURN_IF_ERROR(TypeIs(b, "b", Type::kI32));
  const Type want = a.type == Type::kI32 ? Type::kI32 : Type::kF32;
  TESSERA_RETURN_IF_ERROR(TypeIs(node_, "dst", want));
  if (b.ne[3] != 1 || b.ne[1] != a.ne[2] || b.ne[2] != a.ne[3]) {
    return Invalid("b ", Describe(b), " must be [n, ", a.ne[2], ", ", a.ne[3],
                   ", 1] for a ", Describe(a));
  }
  const int64_t ne[kMaxDims] = {a.ne[0], b.ne[0], b.ne[1], b.ne[2]};
  return ShapeIs(node_, "dst", ne);
}

// src = {b: the rows, c: their indices}; the node is the destination.
absl::Status NodeChecker::SetRows() const {
  TESSERA_RETURN_IF_ERROR(Operand(&node_, "dst"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[0], "b"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[1], "c"));
  const Tensor& b = *node_.src[0];
  const Tensor& c = *node_.src[1];
  TESSERA_RETURN_IF_ERROR(IsF32OrF16(b, "b"));
  if (c.type != Type::kI32 && c.type != Type::kI64) {
    return Invalid("c ", Describe(c), " must be i32 or i64");
  }
  if (node_.type == Type::kI32 || node_.type == Type::kI64) {
    return Invalid("dst ", Describe(node_),
                   " must be f32, f16, bf16 or quantized");
  }
  if (node_.ne[0] != b.ne[0] || node_.ne[2] != b.ne[2] ||
      node_.ne[3] != b.ne[3]) {
    return Invalid("b ", Describe(b), " does not fit rows of dst ",
                   Describe(node_));
  }
  if (c.ne[0] != b.ne[1] || c.ne[3] != 1 || c.ne[1] <= 0 || c.ne[2] <= 0 ||
      b.ne[2] % c.ne[1] != 0 || b.ne[3] % c.ne[2] != 0) {
    return Invalid("c ", Describe(c), " does not index the rows of b ",
                   Describe(b));
  }
  return absl::OkStatus();
}

absl::Status NodeChecker::SoftMax() const {
  TESSERA_RETURN_IF_ERROR(RowOp("a", Type::kF32, Type::kF32));
  const Tensor& a = *node_.src[0];
  TESSERA_RETURN_IF_ERROR(ShapeIs(node_, "dst", a.ne));
  if (node_.src[1] == nullptr) return absl::OkStatus();
  return Mask(*node_.src[1], a.ne[0], a.ne[1], a.ne[2], a.ne[3]);
}

absl::Status NodeChecker::Rope() const {
  TESSERA_RETURN_IF_ERROR(Operand(&node_, "dst"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[0], "a"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[1], "pos"));
  const Tensor& a = *node_.src[0];
  const Tensor& pos = *node_.src[1];
  TESSERA_RETURN_IF_ERROR(IsF32OrF16(a, "a"));
  TESSERA_RETURN_IF_ERROR(TypeIs(node_, "dst", a.type));
  TESSERA_RETURN_IF_ERROR(ShapeIs(node_, "dst", a.ne));
  TESSERA_RETURN_IF_ERROR(TypeIs(pos, "pos", Type::kI32));
  const int64_t pos_ne[kMaxDims] = {a.ne[2], 1, 1, 1};
  TESSERA_RETURN_IF_ERROR(ShapeIs(pos, "pos", pos_ne));
  const int32_t n_dims = node_.op_params[1];
  const int32_t mode = node_.op_params[2];
  if (n_dims < 0 || n_dims % 2 != 0 || n_dims > a.ne[0]) {
    return Invalid("n_dims ", n_dims, " must be even and in [0, ", a.ne[0],
                   "]");
  }
  if (mode != kRopeNormal && mode != kRopeNeox) {
    return Invalid("unknown mode ", mode);
  }
  if (node_.src[2] == nullptr) return absl::OkStatus();
  const Tensor& factors = *node_.src[2];
  TESSERA_RETURN_IF_ERROR(Operand(&factors, "freq_factors"));
  TESSERA_RETURN_IF_ERROR(TypeIs(factors, "freq_factors", Type::kF32));
  if (factors.ne[0] < n_dims / 2 || factors.ne[1] != 1 || factors.ne[2] != 1 ||
      factors.ne[3] != 1) {
    return Invalid("freq_factors ", Describe(factors), " must be [>= ",
                   n_dims / 2, "]");
  }
  return absl::OkStatus();
}

absl::Status NodeChecker::Concat() const {
  TESSERA_RETURN_IF_ERROR(Operand(&node_, "dst"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[0], "a"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[1], "b"));
  const Tensor& a = *node_.src[0];
  const Tensor& b = *node_.src[1];
  if (Traits(a.type).is_quantized) {
    return Invalid("a ", Describe(a), " must not be quantized");
  }
  TESSERA_RETURN_IF_ERROR(TypeIs(b, "b", a.type));
  TESSERA_RETURN_IF_ERROR(TypeIs(node_, "dst", a.type));
  const int32_t dim = node_.op_params[0];
  if (dim < 0 || dim >= kMaxDims) {
    return Invalid("dim ", dim, " is not in [0, 4)");
  }
  int64_t ne[kMaxDims];
  for (int i = 0; i < kMaxDims; ++i) {
    if (i != dim && a.ne[i] != b.ne[i]) {
      return Invalid("a ", Describe(a), " and b ", Describe(b),
                     " differ in dimension ", i);
    }
    ne[i] = i == dim ? a.ne[i] + b.ne[i] : a.ne[i];
  }
  return ShapeIs(node_, "dst", ne);
}

absl::Status NodeChecker::FlashAttnExt() const {
  TESSERA_RETURN_IF_ERROR(RowOp("q", Type::kF32, Type::kF32));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[1], "k"));
  TESSERA_RETURN_IF_ERROR(Operand(node_.src[2], "v"));
  const Tensor& q = *node_.src[0];
  const Tensor& k = *node_.src[1];
  const Tensor& v = *node_.src[2];
  for (const Tensor* t : {&k, &v}) {
    if (!IsAttnKvType(t->type)) {
      return Invalid(t == &k ? "k " : "v ", Describe(*t), " must be ",
                     kAttnKvTypeNames);
    }
  }
  if (k.ne[0] != q.ne[0] || k.ne[2] <= 0 || k.ne[3] <= 0 ||
      q.ne[2] % k.ne[2] != 0 || q.ne[3] % k.ne[3] != 0) {
    return Invalid("k ", Describe(k), " does not fit q ", Describe(q));
  }
  if (v.ne[1] != k.ne[1] || v.ne[2] != k.ne[2] || v.ne[3] != k.ne[3]) {
    return Invalid("v ", Describe(v), " does not fit k ", Describe(k));
  }
  const int64_t ne[kMaxDims] = {v.ne[0], q.ne[2], q.ne[1], q.ne[3]};
  TESSERA_RETURN_IF_ERROR(ShapeIs(node_, "dst", ne));
  if (node_.src[3] == nullptr) return absl::OkStatus();
  return Mask(*node_.src[3], k.ne[1], q.ne[1], q.ne[2], q.ne[3]);
}

// The op family's checks of `check`'s node.
absl::Status CheckOp(const NodeChecker& check, const Tensor& node) {
  if (IsViewOp(node.op)) return absl::OkStatus();
  switch (node.op) {
    case Op::kDup:
    case Op::kCpy:
    case Op::kCont:
      return check.Copy();
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      return check.Binary();
    case Op::kScale:
    case Op::kSqr:
    case Op::kSqrt:
    case Op::kLog:
    case Op::kUnary:
      return check.UnaryLike();
    case Op::kGlu:
      return check.Glu();
    case Op::kSumRows:
    case Op::kMean:
      return check.SumRows();
    case Op::kArgmax:
      return check.Argmax();
    case Op::kNorm:
    case Op::kRmsNorm:
      return check.Norm();
    case Op::kArgsort:
      return check.Argsort();
    case Op::kMulMat:
      return check.MulMat();
    case Op::kGetRows:
      return check.GetRows();
    case Op::kSetRows:
      return check.SetRows();
    case Op::kSoftMax:
      return check.SoftMax();
    case Op::kRope:
      return check.Rope();
    case Op::kConcat:
      return check.Concat();
    case Op::kFlashAttnExt:
      return check.FlashAttnExt();
    default:  // NONE and the view ops passed above.
      break;
  }
  return check.Invalid("unknown op");
}

}  // namespace

absl::Status CheckNode(const Tensor& node, std::string_view where,
                       OperandLimits limits) {
  return CheckOp(NodeChecker(node, where, limits, /*need_data=*/true), node);
}

absl::Status CheckNodeShape(const Tensor& node, std::string_view where) {
  return CheckOp(
      NodeChecker(
          node, where,
          [](const Tensor&, const char*) { return absl::OkStatus(); },
          /*need_data=*/false),
      node);
}

absl::Status CheckNode(const Tensor& node, std::string_view where) {
  return CheckNode(node, where,
                   [](const Tensor&, const char*) { return absl::OkStatus(); });
}

absl::Status CheckAlignment(const Tensor& t) {
  const size_t align = TypeAlignment(t.type);
  for (int i = 0; i < kMaxDims; ++i) {
    if (t.nb[i] % align != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("nb[", i, "] = ", t.nb[i], " is not a multiple of ",
                       align, ", the alignment of ",
                       std::string(TypeName(t.type))));
    }
  }
  if (t.view_src != nullptr && t.view_offs % align != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("view_offs ", t.view_offs, " is not a multiple of ",
                     align, ", the alignment of ",
                     std::string(TypeName(t.type))));
  }
  return absl::OkStatus();
}

}  // namespace tessera
