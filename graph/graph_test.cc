#include "graph/graph.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "graph/context.h"
#include "graph/ops.h"
#include "graph/tensor.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;

Tensor* New(Context& ctx, Type type, std::vector<int64_t> ne,
            const char* name = "") {
  absl::StatusOr<Tensor*> t = ctx.NewTensor(type, ne);
  EXPECT_TRUE(t.ok()) << t.status();
  (*t)->name = name;
  return *t;
}

std::vector<Tensor*> Vec(absl::Span<Tensor* const> s) {
  return std::vector<Tensor*>(s.begin(), s.end());
}

// --- Context ---

TEST(ContextTest, NewTensorIsContiguousWithMissingDimsOne) {
  Context ctx;
  absl::StatusOr<Tensor*> t = ctx.NewTensor(Type::kF16, {6, 5});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->type, Type::kF16);
  EXPECT_EQ((*t)->ne[0], 6);
  EXPECT_EQ((*t)->ne[1], 5);
  EXPECT_EQ((*t)->ne[2], 1);
  EXPECT_EQ((*t)->ne[3], 1);
  EXPECT_EQ((*t)->nb[0], 2u);
  EXPECT_EQ((*t)->nb[1], 12u);
  EXPECT_EQ((*t)->nb[2], 60u);
  EXPECT_EQ((*t)->nb[3], 60u);
  EXPECT_EQ((*t)->op, Op::kNone);
  EXPECT_EQ((*t)->data, nullptr);
  EXPECT_EQ(ctx.size(), 1u);
}

TEST(ContextTest, NewTensorQuantizedStridesCountBlocks) {
  Context ctx;
  absl::StatusOr<Tensor*> t = ctx.NewTensor(Type::kQ4_0, {64, 3});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->nb[0], 18u);
  EXPECT_EQ((*t)->nb[1], 36u);
  EXPECT_EQ((*t)->nb[2], 108u);
  EXPECT_EQ((*t)->NumBytes(), 108u);
}

TEST(ContextTest, NewTensorRejectsBadInput) {
  Context ctx;
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_EQ(ctx.NewTensor(Type::kF32, {4, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ctx.NewTensor(Type::kF32, {1, 1, 1, 1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ctx.NewTensor(Type::kQ8_0, {33}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ctx.NewTensor(Type::kF32, {big}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ctx.NewTensor(Type::kF32, {1 << 20, 1 << 20, 1 << 20, 1 << 20})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ctx.NewTensor(static_cast<Type>(42), {4}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ctx.size(), 0u);
}

TEST(ContextTest, NewTensorAllowsEmptyTensors) {
  Context ctx;
  absl::StatusOr<Tensor*> t = ctx.NewTensor(Type::kF32, {0, 3});
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE((*t)->IsEmpty());
  EXPECT_EQ((*t)->NumBytes(), 0u);
}

TEST(ContextTest, NewTensorLikeCopiesMetadataButNotData) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4, 3}, "a");
  a->flags = kFlagParam;
  int x = 0;
  a->data = &x;
  Tensor* b = ctx.NewTensorLike(*a);
  EXPECT_NE(b, a);
  EXPECT_EQ(b->name, "a");
  EXPECT_EQ(b->flags, kFlagParam);
  EXPECT_TRUE(SameShape(*a, *b));
  EXPECT_EQ(b->data, nullptr);
  EXPECT_EQ(b->buffer, nullptr);
}

// --- Tensor ---

TEST(TensorTest, NumBytesFollowsStrides) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4, 3, 2});
  EXPECT_EQ(a->NumBytes(), 96u);
  absl::StatusOr<Tensor*> t = Transpose(ctx, a);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->NumBytes(), 96u);
  // A [2, 2] view with row stride 16 spans 16 + 8 bytes.
  absl::StatusOr<Tensor*> v = View(ctx, a, {2, 2}, {16}, 4);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->NumBytes(), 24u);
}

TEST(TensorTest, CheckedNumBytesAgreesAndCatchesOverflow) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4, 3, 2});
  EXPECT_EQ(CheckedNumBytes(*a), a->NumBytes());
  Tensor* q = New(ctx, Type::kQ8_0, {64, 3});
  EXPECT_EQ(CheckedNumBytes(*q), q->NumBytes());
  EXPECT_EQ(CheckedNumBytes(*q), std::optional<size_t>(3 * 2 * 34));
  Tensor* empty = New(ctx, Type::kF32, {0, 3});
  EXPECT_EQ(CheckedNumBytes(*empty), std::optional<size_t>(0));
  // Strides a client could send: the span wraps size_t or passes int64_t.
  Tensor huge = *a;
  huge.ne[1] = int64_t{1} << 40;
  huge.nb[1] = size_t{1} << 40;
  EXPECT_EQ(CheckedNumBytes(huge), std::nullopt);
  huge.ne[1] = 2;
  huge.nb[1] = size_t{1} << 63;
  EXPECT_EQ(CheckedNumBytes(huge), std::nullopt);
  Tensor blocks = *q;
  blocks.ne[0] = int64_t{32} << 40;
  blocks.nb[0] = size_t{1} << 40;
  EXPECT_EQ(CheckedNumBytes(blocks), std::nullopt);
}

TEST(TensorTest, ContiguityPredicates) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4, 3});
  EXPECT_TRUE(a->IsContiguous());
  EXPECT_TRUE(a->HasContiguousRows());
  EXPECT_FALSE(a->IsTransposed());
  Tensor* t = *Transpose(ctx, a);
  EXPECT_FALSE(t->IsContiguous());
  EXPECT_FALSE(t->HasContiguousRows());
  EXPECT_TRUE(t->IsTransposed());
  Tensor* rows = *View(ctx, a, {2, 3}, {16}, 0);
  EXPECT_FALSE(rows->IsContiguous());
  EXPECT_TRUE(rows->HasContiguousRows());
  // Dimensions of size 1 may have any stride.
  Tensor* col = *View(ctx, a, {4, 1}, {999}, 0);
  EXPECT_TRUE(col->IsContiguous());
}

TEST(TensorTest, ContiguousStridesOfQuantizedType) {
  const int64_t ne[4] = {64, 2, 3, 1};
  size_t nb[4];
  ContiguousStrides(Type::kQ8_0, ne, nb);
  EXPECT_EQ(nb[0], 34u);
  EXPECT_EQ(nb[1], 68u);
  EXPECT_EQ(nb[2], 136u);
  EXPECT_EQ(nb[3], 408u);
}

TEST(TensorTest, CanRepeatAndSameShape) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {6, 4, 2});
  Tensor* b = New(ctx, Type::kF32, {3, 1, 2});
  Tensor* c = New(ctx, Type::kF32, {4});
  Tensor* e = New(ctx, Type::kF32, {0, 4});
  EXPECT_TRUE(CanRepeat(*b, *a));
  EXPECT_FALSE(CanRepeat(*a, *b));
  EXPECT_FALSE(CanRepeat(*c, *a));
  EXPECT_FALSE(CanRepeat(*e, *a));
  EXPECT_TRUE(CanRepeat(*e, *e));
  EXPECT_TRUE(SameShape(*a, *a));
  EXPECT_FALSE(SameShape(*a, *b));
}

TEST(TensorTest, DescribeAndNames) {
  Context ctx;
  Tensor* a = New(ctx, Type::kBF16, {4, 3}, "w");
  EXPECT_EQ(Describe(*a), "w bf16 [4, 3, 1, 1]");
  EXPECT_EQ(OpName(Op::kMulMat), "MUL_MAT");
  EXPECT_EQ(OpName(Op::kFlashAttnExt), "FLASH_ATTN_EXT");
  EXPECT_EQ(OpName(static_cast<Op>(999)), "INVALID_OP");
  EXPECT_EQ(UnaryOpName(UnaryOp::kSilu), "SILU");
  EXPECT_EQ(GluOpName(GluOp::kGeGlu), "GEGLU");
}

// --- Graph ---

TEST(GraphTest, ExpandOrdersSourcesFirst) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4}, "a");
  Tensor* b = New(ctx, Type::kF32, {4}, "b");
  Tensor* c = *Add(ctx, a, b);
  Tensor* d = *Mul(ctx, c, a);
  Tensor* e = *Sqr(ctx, d);
  Graph g;
  ASSERT_TRUE(g.Expand(e).ok());
  EXPECT_THAT(Vec(g.leafs()), ElementsAre(a, b));
  EXPECT_THAT(Vec(g.nodes()), ElementsAre(c, d, e));
}

TEST(GraphTest, SourceOrderDecidesDepthFirstOrder) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4}, "a");
  Tensor* b = New(ctx, Type::kF32, {4}, "b");
  Tensor* sa = *Sqr(ctx, a);
  Tensor* sb = *Sqrt(ctx, b);
  Tensor* out = *Add(ctx, sb, sa);
  Graph g;
  ASSERT_TRUE(g.Expand(out).ok());
  EXPECT_THAT(Vec(g.leafs()), ElementsAre(b, a));
  EXPECT_THAT(Vec(g.nodes()), ElementsAre(sb, sa, out));
}

TEST(GraphTest, ExpandAddsEachTensorOnce) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4}, "a");
  Tensor* sq = *Sqr(ctx, a);
  Tensor* x = *Add(ctx, sq, sq);
  Tensor* y = *Mul(ctx, sq, a);
  Graph g;
  ASSERT_TRUE(g.Expand(x).ok());
  ASSERT_TRUE(g.Expand(y).ok());
  ASSERT_TRUE(g.Expand(x).ok());
  EXPECT_THAT(Vec(g.leafs()), ElementsAre(a));
  EXPECT_THAT(Vec(g.nodes()), ElementsAre(sq, x, y));
}

TEST(GraphTest, LeafsAreOpNoneEvenWithParamFlag) {
  Context ctx;
  Tensor* w = New(ctx, Type::kF32, {4, 4}, "w");
  w->flags = kFlagParam;
  Tensor* x = New(ctx, Type::kF32, {4, 2}, "x");
  x->flags = kFlagInput;
  Tensor* y = *MulMat(ctx, w, x);
  Graph g;
  ASSERT_TRUE(g.Expand(y).ok());
  EXPECT_THAT(Vec(g.leafs()), ElementsAre(w, x));
  EXPECT_THAT(Vec(g.nodes()), ElementsAre(y));
}

TEST(GraphTest, ExpandingALeafAddsOnlyIt) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4}, "a");
  Graph g;
  ASSERT_TRUE(g.Expand(a).ok());
  EXPECT_THAT(Vec(g.leafs()), ElementsAre(a));
  EXPECT_TRUE(g.nodes().empty());
}

TEST(GraphTest, ViewsPullInTheirSources) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4, 4}, "a");
  Tensor* b = New(ctx, Type::kF32, {4, 2}, "b");
  Tensor* v = *View(ctx, a, {4, 2}, {16}, 32);
  Tensor* r = *Reshape(ctx, v, {8});  // v packs its rows: contiguous
  Tensor* out = *Add(ctx, *Reshape(ctx, b, {8}), r);
  Graph g;
  ASSERT_TRUE(g.Expand(out).ok());
  ASSERT_EQ(g.nodes().size(), 4u);
  EXPECT_THAT(Vec(g.leafs()), ElementsAre(b, a));
  EXPECT_EQ(g.nodes()[1], v);
  EXPECT_EQ(g.nodes()[2], r);
  EXPECT_EQ(g.nodes()[3], out);
}

TEST(GraphTest, SetRowsDestinationIsReachedThroughViewSource) {
  Context ctx;
  Tensor* dst = New(ctx, Type::kF16, {8, 10}, "cache");
  Tensor* rows = New(ctx, Type::kF32, {8, 3}, "rows");
  Tensor* idx = New(ctx, Type::kI32, {3}, "idx");
  Tensor* s = *SetRows(ctx, dst, rows, idx);
  Graph g;
  ASSERT_TRUE(g.Expand(s).ok());
  EXPECT_THAT(Vec(g.leafs()), ElementsAre(rows, idx, dst));
  EXPECT_THAT(Vec(g.nodes()), ElementsAre(s));
}

TEST(GraphTest, MaxNodesIsEnforcedAndLeavesGraphUnchanged) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4}, "a");
  Tensor* b = New(ctx, Type::kF32, {4}, "b");
  Tensor* c = *Add(ctx, a, b);
  Tensor* d = *Sqr(ctx, c);
  Graph small(3);
  absl::Status s = small.Expand(d);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(small.nodes().empty());
  EXPECT_TRUE(small.leafs().empty());
  // Expanding a smaller part still works afterwards.
  ASSERT_TRUE(small.Expand(c).ok());
  EXPECT_EQ(small.nodes().size() + small.leafs().size(), 3u);
  EXPECT_EQ(small.Expand(d).code(), absl::StatusCode::kResourceExhausted);

  Graph exact(4);
  ASSERT_TRUE(exact.Expand(d).ok());
  EXPECT_EQ(exact.nodes().size() + exact.leafs().size(), 4u);
}

TEST(GraphTest, CycleIsInvalidArgument) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4}, "a");
  Tensor* b = *Sqr(ctx, a);
  Tensor* c = *Sqrt(ctx, b);
  b->src[1] = c;  // b -> c -> b
  Graph g;
  absl::Status s = g.Expand(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cycle"), std::string_view::npos);
  EXPECT_TRUE(g.nodes().empty());
  EXPECT_TRUE(g.leafs().empty());

  Tensor* self = *Sqr(ctx, a);
  self->src[0] = self;
  EXPECT_EQ(g.Expand(self).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GraphTest, NullIsInvalidArgument) {
  Graph g;
  EXPECT_EQ(g.Expand(nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GraphTest, DeepChainDoesNotRecurse) {
  Context ctx;
  Tensor* t = New(ctx, Type::kF32, {2}, "x");
  constexpr int kDepth = 100000;
  for (int i = 0; i < kDepth; ++i) t = *Sqr(ctx, t);
  Graph g(kDepth + 1);
  ASSERT_TRUE(g.Expand(t).ok());
  EXPECT_EQ(g.nodes().size(), static_cast<size_t>(kDepth));
  EXPECT_EQ(g.nodes().back(), t);
}

TEST(GraphTest, ClearForgetsEverything) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4}, "a");
  Tensor* b = *Sqr(ctx, a);
  Graph g;
  ASSERT_TRUE(g.Expand(b).ok());
  g.Clear();
  EXPECT_TRUE(g.nodes().empty());
  EXPECT_TRUE(g.leafs().empty());
  ASSERT_TRUE(g.Expand(b).ok());
  EXPECT_THAT(Vec(g.nodes()), ElementsAre(b));
}

TEST(GraphTest, AddNodeAndLeafAppend) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4}, "a");
  Tensor* b = *Sqr(ctx, a);
  Graph g;
  g.AddLeaf(a);
  g.AddNode(b);
  EXPECT_THAT(Vec(g.leafs()), ElementsAre(a));
  EXPECT_THAT(Vec(g.nodes()), ElementsAre(b));
}

TEST(GraphTest, IsViewOp) {
  EXPECT_TRUE(IsViewOp(Op::kView));
  EXPECT_TRUE(IsViewOp(Op::kReshape));
  EXPECT_TRUE(IsViewOp(Op::kPermute));
  EXPECT_TRUE(IsViewOp(Op::kTranspose));
  EXPECT_TRUE(IsViewOp(Op::kNone));
  EXPECT_FALSE(IsViewOp(Op::kCpy));
  EXPECT_FALSE(IsViewOp(Op::kSetRows));
  EXPECT_FALSE(IsViewOp(Op::kAdd));
}

}  // namespace
}  // namespace tessera
