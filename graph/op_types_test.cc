#include "graph/op_types.h"

#include "graph/context.h"
#include "graph/ops.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

class OpTypesTest : public testing::Test {
 protected:
  Tensor* New(Type type) { return *ctx_.NewTensor(type, {32, 4}); }
  Tensor* NewWide(Type type) { return *ctx_.NewTensor(type, {256, 4}); }
  Context ctx_;
};

TEST_F(OpTypesTest, ElementwiseTakesAFloatAndAnF32OrSameTypeOperand) {
  Tensor* a = New(Type::kF16);
  EXPECT_TRUE(OpHasTypes(**Add(ctx_, a, New(Type::kF32))));
  EXPECT_TRUE(OpHasTypes(**Add(ctx_, a, New(Type::kF16))));
  Tensor* node = *Add(ctx_, a, New(Type::kF16));
  node->src[1] = New(Type::kBF16);
  EXPECT_FALSE(OpHasTypes(*node));
  node->src[1] = nullptr;
  EXPECT_FALSE(OpHasTypes(*node));
}

TEST_F(OpTypesTest, QuantizedCopiesOnlyToF32OrItself) {
  Tensor* q = New(Type::kQ8_0);
  Tensor* node = *Cpy(ctx_, q, New(Type::kF32));
  EXPECT_TRUE(OpHasTypes(*node));
  node->type = Type::kF16;
  EXPECT_FALSE(OpHasTypes(*node));
  node->type = Type::kQ8_0;
  EXPECT_TRUE(OpHasTypes(*node));
}

TEST_F(OpTypesTest, OpsAndSubOpsOutsideTheirEnumsHaveNoTypes) {
  Tensor* node = *Add(ctx_, New(Type::kF32), New(Type::kF32));
  node->op = static_cast<Op>(kOpCount);
  EXPECT_FALSE(OpHasTypes(*node));
  node->op = static_cast<Op>(-1);
  EXPECT_FALSE(OpHasTypes(*node));

  node->op = Op::kUnary;
  node->op_params[0] = kUnaryOpCount;
  EXPECT_FALSE(OpHasTypes(*node));
  node->op_params[0] = 0;
  EXPECT_TRUE(OpHasTypes(*node));
}

TEST_F(OpTypesTest, ViewsHaveTheirTypesWhateverTheSource) {
  Tensor* node = *Transpose(ctx_, New(Type::kI32));
  EXPECT_TRUE(OpHasTypes(*node));
  node->src[0] = nullptr;
  EXPECT_TRUE(OpHasTypes(*node));
}

TEST_F(OpTypesTest, MulMatTakesAnyWeightTypeAndAnF32Input) {
  EXPECT_TRUE(OpHasTypes(**MulMat(ctx_, New(Type::kQ4_0), New(Type::kF32))));
  Tensor* node = *MulMat(ctx_, New(Type::kF16), New(Type::kF32));
  node->src[1] = New(Type::kF16);
  EXPECT_FALSE(OpHasTypes(*node));
}

TEST_F(OpTypesTest, KQuantsAreWeightsTablesAndCopyTargets) {
  for (Type t : {Type::kQ4_K, Type::kQ5_K, Type::kQ6_K}) {
    EXPECT_TRUE(OpHasTypes(**MulMat(ctx_, NewWide(t), NewWide(Type::kF32))));
    Tensor* idx = *ctx_.NewTensor(Type::kI32, {3});
    EXPECT_TRUE(OpHasTypes(**GetRows(ctx_, NewWide(t), idx)));
    EXPECT_TRUE(OpHasTypes(**Cpy(ctx_, NewWide(Type::kF32), NewWide(t))));
    EXPECT_TRUE(OpHasTypes(**Cpy(ctx_, NewWide(t), NewWide(Type::kF32))));
    Tensor* to_f16 = *Cpy(ctx_, NewWide(t), NewWide(Type::kF32));
    to_f16->type = Type::kF16;
    EXPECT_FALSE(OpHasTypes(*to_f16));
  }
}

}  // namespace
}  // namespace tessera
