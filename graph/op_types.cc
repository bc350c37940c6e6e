#include "graph/op_types.h"

#include <cstdint>

#include "graph/type.h"

namespace tessera {
namespace {

bool Valid(const Tensor* t) {
  return t != nullptr && IsValidType(static_cast<int32_t>(t->type));
}

bool IsFloat(const Tensor* t) { return Valid(t) && IsFloatType(t->type); }

bool Is(const Tensor* t, Type type) { return Valid(t) && t->type == type; }

// An optional source: absent, or of one of the two types.
bool AbsentOr(const Tensor* t, Type a, Type b) {
  return t == nullptr || Is(t, a) || Is(t, b);
}

bool InRange(int32_t value, int count) { return value >= 0 && value < count; }

}  // namespace

bool IsAttnKvType(Type type) {
  switch (type) {
    case Type::kF32:
    case Type::kF16:
    case Type::kBF16:
    case Type::kQ8_0:
    case Type::kQ4_0:
    case Type::kQ4_1:
    case Type::kQ5_0:
    case Type::kQ5_1:
      return true;
    default:
      return false;
  }
}

bool OpHasTypes(const Tensor& node) {
  if (!InRange(static_cast<int32_t>(node.op), kOpCount) || !Valid(&node)) {
    return false;
  }
  const Tensor* a = node.src[0];
  const Tensor* b = node.src[1];
  const Type t = node.type;
  switch (node.op) {
    case Op::kNone:
    case Op::kView:
    case Op::kReshape:
    case Op::kPermute:
    case Op::kTranspose:
      return true;
    case Op::kDup:
    case Op::kCont:
      return Is(a, t);
    case Op::kCpy:
      // Any conversion through float, but a quantized source converts only
      // to F32 (or copies to its own type).
      return Valid(a) &&
             (!Traits(a->type).is_quantized || t == a->type || t == Type::kF32);
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      return IsFloat(a) && t == a->type &&
             (Is(b, Type::kF32) || Is(b, a->type));
    case Op::kScale:
    case Op::kSqr:
    case Op::kSqrt:
    case Op::kLog:
      return IsFloat(a) && t == a->type;
    case Op::kUnary:
      return IsFloat(a) && t == a->type &&
             InRange(node.op_params[0], kUnaryOpCount);
    case Op::kGlu:
      return IsFloat(a) && t == a->type && (b == nullptr || Is(b, t)) &&
             InRange(node.op_params[0], kGluOpCount) &&
             InRange(node.op_params[1], 2);
    case Op::kSumRows:
    case Op::kMean:
    case Op::kNorm:
    case Op::kRmsNorm:
      return Is(a, Type::kF32) && t == Type::kF32;
    case Op::kArgmax:
      return Is(a, Type::kF32) && t == Type::kI32;
    case Op::kArgsort:
      return Is(a, Type::kF32) && t == Type::kI32 &&
             InRange(node.op_params[0], 2);
    case Op::kMulMat:
      return Valid(a) && Is(b, Type::kF32) && t == Type::kF32;
    case Op::kGetRows:
      return Valid(a) && Is(b, Type::kI32) &&
             t == (a->type == Type::kI32 ? Type::kI32 : Type::kF32);
    case Op::kSetRows:
      // src = {rows, indices}; the node is a view of the destination.
      return (Is(a, Type::kF32) || Is(a, Type::kF16)) &&
             (Is(b, Type::kI32) || Is(b, Type::kI64)) && t != Type::kI32 &&
             t != Type::kI64;
    case Op::kSoftMax:
      return Is(a, Type::kF32) && t == Type::kF32 &&
             AbsentOr(b, Type::kF32, Type::kF16);
    case Op::kRope:
      return (Is(a, Type::kF32) || Is(a, Type::kF16)) && t == a->type &&
             Is(b, Type::kI32) && 
             AbsentOr(node.src[2], Type::kF32, Type::kF32);
    case Op::kConcat:
      return Valid(a) && !Traits(a->type).is_quantized && Is(b, a->type) &&
             t == a->type;
    case Op::kFlashAttnExt:
      return Is(a, Type::kF32) && Valid(b) && IsAttnKvType(b->type) &&
             Valid(node.src[2]) && IsAttnKvType(node.src[2]->type) &&
             AbsentOr(node.src[3], Type::kF32, Type::kF16) && t == Type::kF32;
  }
  return false;
}

}  // namespace tessera
