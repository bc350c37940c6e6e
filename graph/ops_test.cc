#include "graph/ops.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph/context.h"
#include "graph/tensor.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// Binds `var` to the tensor `expr` builds, failing the test on an error.
#define BUILD(var, expr)                                            \
  absl::StatusOr<Tensor*> var##_or = (expr);                        \
  ASSERT_TRUE(var##_or.ok()) << #expr << ": " << var##_or.status(); \
  Tensor* var = *var##_or

Tensor* New(Context& ctx, Type type, std::vector<int64_t> ne) {
  absl::StatusOr<Tensor*> t = ctx.NewTensor(type, ne);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

void ExpectNe(const Tensor* t, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
  EXPECT_EQ(t->ne[0], n0);
  EXPECT_EQ(t->ne[1], n1);
  EXPECT_EQ(t->ne[2], n2);
  EXPECT_EQ(t->ne[3], n3);
}

void ExpectNb(const Tensor* t, size_t b0, size_t b1, size_t b2, size_t b3) {
  EXPECT_EQ(t->nb[0], b0);
  EXPECT_EQ(t->nb[1], b1);
  EXPECT_EQ(t->nb[2], b2);
  EXPECT_EQ(t->nb[3], b3);
}

float Bits(int32_t v) {
  float f;
  std::memcpy(&f, &v, sizeof(f));
  return f;
}

// --- Builders: shapes, types, params, sources ---

TEST(OpsTest, DupAndContMakeContiguousCopies) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF16, {4, 3});
  BUILD(t, Transpose(ctx, a));
  BUILD(c, Cont(ctx, t));
  EXPECT_EQ(c->op, Op::kCont);
  EXPECT_EQ(c->type, Type::kF16);
  ExpectNe(c, 3, 4, 1, 1);
  ExpectNb(c, 2, 6, 24, 24);
  EXPECT_EQ(c->src[0], t);
  EXPECT_FALSE(c->IsView());
  BUILD(d, Dup(ctx, a));
  EXPECT_EQ(d->op, Op::kDup);
  EXPECT_EQ(d->type, Type::kF16);
  ExpectNe(d, 4, 3, 1, 1);
  EXPECT_TRUE(d->IsContiguous());
}

TEST(OpsTest, ContAsCopiesIntoAShapeOfAsManyElements) {
  Context ctx;
  // Heads merged as llama.cpp's attention does: [hd, heads, n] permuted to
  // [hd, n, heads], copied into [hd * heads, n].
  Tensor* a = New(ctx, Type::kF32, {8, 3, 5});
  BUILD(p, Permute(ctx, a, 0, 2, 1, 3));
  BUILD(c, ContAs(ctx, p, {24, 5}));
  EXPECT_EQ(c->op, Op::kCont);
  EXPECT_EQ(c->type, Type::kF32);
  ExpectNe(c, 24, 5, 1, 1);
  EXPECT_TRUE(c->IsContiguous());
  EXPECT_EQ(c->src[0], p);
  // What a decoder rebuilds from the node passes validation.
  EXPECT_TRUE(ValidateNode(*c).ok()) << ValidateNode(*c);
}

TEST(OpsTest, CpyReturnsAViewOfTheDestination) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4, 3});
  Tensor* b = New(ctx, Type::kF16, {12});
  BUILD(c, Cpy(ctx, a, b));
  EXPECT_EQ(c->op, Op::kCpy);
  EXPECT_EQ(c->type, Type::kF16);
  ExpectNe(c, 12, 1, 1, 1);
  ExpectNb(c, 2, 24, 24, 24);
  EXPECT_EQ(c->src[0], a);
  EXPECT_EQ(c->src[1], b);
  EXPECT_EQ(c->view_src, b);
  EXPECT_EQ(c->view_offs, 0u);
  // Into a view: the result points at the root with the view's offset.
  Tensor* big = New(ctx, Type::kF32, {100});
  BUILD(v, View(ctx, big, {12}, {}, 40));
  BUILD(c2, Cpy(ctx, a, v));
  EXPECT_EQ(c2->view_src, big);
  EXPECT_EQ(c2->view_offs, 40u);
}

TEST(OpsTest, CpyQuantizationRules) {
  Context ctx;
  Tensor* f32 = New(ctx, Type::kF32, {64, 2});
  Tensor* f16 = New(ctx, Type::kF16, {64, 2});
  Tensor* i32 = New(ctx, Type::kI32, {64, 2});
  Tensor* q8 = New(ctx, Type::kQ8_0, {64, 2});
  Tensor* q4 = New(ctx, Type::kQ4_0, {128});
  EXPECT_TRUE(Cpy(ctx, f32, q8).ok());
  EXPECT_TRUE(Cpy(ctx, f16, q4).ok());
  EXPECT_TRUE(Cpy(ctx, q8, f32).ok());
  EXPECT_TRUE(Cpy(ctx, i32, f32).ok());
  EXPECT_TRUE(Cpy(ctx, f32, i32).ok());
  // The same block type is copied block by block.
  Tensor* q8b = New(ctx, Type::kQ8_0, {32, 4});
  EXPECT_TRUE(Cpy(ctx, q8, q8b).ok());
  EXPECT_FALSE(Cpy(ctx, q8, f16).ok());
  EXPECT_FALSE(Cpy(ctx, q8, q4).ok());
  EXPECT_FALSE(Cpy(ctx, i32, q8).ok());
  // Rows of 48 values are not whole Q4_0 blocks.
  Tensor* odd = New(ctx, Type::kF32, {48, 4});
  Tensor* q4b = New(ctx, Type::kQ4_0, {192});
  EXPECT_FALSE(Cpy(ctx, odd, q4b).ok());
}

TEST(OpsTest, BinaryOpsBroadcastBIntoA) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {6, 4, 2, 3});
  Tensor* b = New(ctx, Type::kF32, {3, 2, 1, 3});
  using Builder = absl::StatusOr<Tensor*> (*)(Context&, Tensor*, Tensor*);
  const std::pair<Builder, Op> ops[] = {
      {Add, Op::kAdd}, {Sub, Op::kSub}, {Mul, Op::kMul}, {Div, Op::kDiv}};
  for (const auto& [build, op] : ops) {
    absl::StatusOr<Tensor*> r = build(ctx, a, b);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->op, op);
    EXPECT_EQ((*r)->type, Type::kF32);
    ExpectNe(*r, 6, 4, 2, 3);
    EXPECT_TRUE((*r)->IsContiguous());
    EXPECT_EQ((*r)->src[0], a);
    EXPECT_EQ((*r)->src[1], b);
  }
  // b's type: F32 or a's.
  Tensor* h = New(ctx, Type::kF16, {6, 4});
  Tensor* hb = New(ctx, Type::kF16, {6, 1});
  Tensor* fb = New(ctx, Type::kF32, {1, 4});
  Tensor* bb = New(ctx, Type::kBF16, {6, 4});
  BUILD(hh, Add(ctx, h, hb));
  EXPECT_EQ(hh->type, Type::kF16);
  BUILD(hf, Mul(ctx, h, fb));
  EXPECT_EQ(hf->type, Type::kF16);
  EXPECT_FALSE(Add(ctx, h, bb).ok());
  EXPECT_FALSE(Add(ctx, a, h).ok());
}

TEST(OpsTest, ScaleStoresScaleAndBias) {
  Context ctx;
  Tensor* a = New(ctx, Type::kBF16, {5, 2});
  BUILD(r, Scale(ctx, a, 0.25f, -3.0f));
  EXPECT_EQ(r->op, Op::kScale);
  EXPECT_EQ(r->type, Type::kBF16);
  EXPECT_EQ(Bits(r->op_params[0]), 0.25f);
  EXPECT_EQ(Bits(r->op_params[1]), -3.0f);
  BUILD(r2, Scale(ctx, a, 2.0f));
  EXPECT_EQ(r2->param<float>(1), 0.0f);
}

TEST(OpsTest, ElementwiseKeepShapeAndType) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF16, {5, 2, 3});
  BUILD(s, Sqr(ctx, a));
  BUILD(q, Sqrt(ctx, a));
  BUILD(l, Log(ctx, a));
  EXPECT_EQ(s->op, Op::kSqr);
  EXPECT_EQ(q->op, Op::kSqrt);
  EXPECT_EQ(l->op, Op::kLog);
  for (Tensor* t : {s, q, l}) {
    EXPECT_EQ(t->type, Type::kF16);
    ExpectNe(t, 5, 2, 3, 1);
  }
}

TEST(OpsTest, RowReductions) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {7, 3, 2, 2});
  BUILD(s, SumRows(ctx, a));
  EXPECT_EQ(s->op, Op::kSumRows);
  EXPECT_EQ(s->type, Type::kF32);
  ExpectNe(s, 1, 3, 2, 2);
  BUILD(m, Mean(ctx, a));
  EXPECT_EQ(m->op, Op::kMean);
  ExpectNe(m, 1, 3, 2, 2);
  Tensor* mat = New(ctx, Type::kF32, {7, 3});
  BUILD(am, Argmax(ctx, mat));
  EXPECT_EQ(am->op, Op::kArgmax);
  EXPECT_EQ(am->type, Type::kI32);
  ExpectNe(am, 3, 1, 1, 1);
}

TEST(OpsTest, UnaryStoresItsOp) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4, 4});
  for (int i = 0; i < kUnaryOpCount; ++i) {
    absl::StatusOr<Tensor*> r = Unary(ctx, a, static_cast<UnaryOp>(i));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->op, Op::kUnary);
    EXPECT_EQ((*r)->op_params[0], i);
    ExpectNe(*r, 4, 4, 1, 1);
  }
}

TEST(OpsTest, GluWithAndWithoutGate) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {8, 3});
  Tensor* b = New(ctx, Type::kF32, {8, 3});
  BUILD(g, Glu(ctx, a, b, GluOp::kGeGlu));
  EXPECT_EQ(g->op, Op::kGlu);
  ExpectNe(g, 8, 3, 1, 1);
  EXPECT_EQ(g->op_params[0], static_cast<int32_t>(GluOp::kGeGlu));
  EXPECT_EQ(g->op_params[1], 0);
  EXPECT_EQ(g->src[1], b);
  BUILD(s, GluSplit(ctx, a, GluOp::kSwiGlu, true));
  ExpectNe(s, 4, 3, 1, 1);
  EXPECT_EQ(s->op_params[0], static_cast<int32_t>(GluOp::kSwiGlu));
  EXPECT_EQ(s->op_params[1], 1);
  EXPECT_EQ(s->src[1], nullptr);
  BUILD(n, Glu(ctx, a, nullptr, GluOp::kSwiGlu));
  ExpectNe(n, 4, 3, 1, 1);
  EXPECT_EQ(n->op_params[1], 0);
}

TEST(OpsTest, NormsStoreEps) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {16, 3});
  BUILD(n, Norm(ctx, a, 1e-5f));
  EXPECT_EQ(n->op, Op::kNorm);
  EXPECT_EQ(n->param<float>(0), 1e-5f);
  BUILD(r, RmsNorm(ctx, a, 0.0f));
  EXPECT_EQ(r->op, Op::kRmsNorm);
  ExpectNe(r, 16, 3, 1, 1);
}

TEST(OpsTest, MulMatShapeAndBroadcast) {
  Context ctx;
  Tensor* a = New(ctx, Type::kQ4_0, {64, 10, 2, 3});
  Tensor* b = New(ctx, Type::kF32, {64, 5, 4, 6});
  BUILD(r, MulMat(ctx, a, b));
  EXPECT_EQ(r->op, Op::kMulMat);
  EXPECT_EQ(r->type, Type::kF32);
  ExpectNe(r, 10, 5, 4, 6);
  ExpectNb(r, 4, 40, 200, 800);
  EXPECT_EQ(r->src[0], a);
  EXPECT_EQ(r->src[1], b);
}

TEST(OpsTest, GetRowsShapesAndType) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF16, {8, 10, 2, 3});
  Tensor* idx = New(ctx, Type::kI32, {5, 2, 3});
  BUILD(r, GetRows(ctx, a, idx));
  EXPECT_EQ(r->op, Op::kGetRows);
  EXPECT_EQ(r->type, Type::kF32);
  ExpectNe(r, 8, 5, 2, 3);
  Tensor* ai = New(ctx, Type::kI32, {8, 10});
  Tensor* i1 = New(ctx, Type::kI32, {4});
  BUILD(ri, GetRows(ctx, ai, i1));
  EXPECT_EQ(ri->type, Type::kI32);
  ExpectNe(ri, 8, 4, 1, 1);
  Tensor* aq = New(ctx, Type::kQ8_0, {32, 10});
  BUILD(rq, GetRows(ctx, aq, i1));
  EXPECT_EQ(rq->type, Type::kF32);
}

TEST(OpsTest, SetRowsIsAViewOfTheDestination) {
  Context ctx;
  Tensor* a = New(ctx, Type::kQ8_0, {32, 10, 2, 3});
  Tensor* b = New(ctx, Type::kF32, {32, 4, 2, 3});
  Tensor* c = New(ctx, Type::kI32, {4, 2, 1});
  BUILD(r, SetRows(ctx, a, b, c));
  EXPECT_EQ(r->op, Op::kSetRows);
  EXPECT_EQ(r->type, Type::kQ8_0);
  ExpectNe(r, 32, 10, 2, 3);
  ExpectNb(r, a->nb[0], a->nb[1], a->nb[2], a->nb[3]);
  EXPECT_EQ(r->view_src, a);
  EXPECT_EQ(r->src[0], b);
  EXPECT_EQ(r->src[1], c);
  EXPECT_EQ(r->src[2], nullptr);
}

TEST(OpsTest, ViewStoresOffsetAndChainsToTheRoot) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {8, 6});
  BUILD(v, View(ctx, a, {4, 3}, {64}, 8));
  EXPECT_EQ(v->op, Op::kView);
  ExpectNe(v, 4, 3, 1, 1);
  ExpectNb(v, 4, 64, 192, 192);
  EXPECT_EQ(v->view_src, a);
  EXPECT_EQ(v->view_offs, 8u);
  EXPECT_EQ(v->op_params[0], 8);
  EXPECT_EQ(v->op_params[1], 0);
  EXPECT_EQ(v->src[0], a);
  BUILD(w, View(ctx, v, {2}, {}, 4));
  EXPECT_EQ(w->src[0], v);
  EXPECT_EQ(w->view_src, a);
  EXPECT_EQ(w->view_offs, 12u);
  EXPECT_EQ(w->op_params[0], 4);
  // 3-D view: missing strides continue contiguously from the last given.
  BUILD(x, View(ctx, a, {2, 2, 2}, {32, 16}, 0));
  ExpectNb(x, 4, 32, 16, 32);
}

TEST(OpsTest, ViewOffsetAbove4GiBUsesBothHalves) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {int64_t{1} << 31, 2});  // metadata only
  const size_t offset = (size_t{2} << 32) + 4;
  BUILD(v, View(ctx, a, {16}, {}, offset));
  EXPECT_EQ(v->op_params[0], 4);
  EXPECT_EQ(v->op_params[1], 2);
  EXPECT_EQ(v->view_offs, offset);
  EXPECT_TRUE(ValidateNode(*v).ok());
}

TEST(OpsTest, ReshapeIsAContiguousView) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {6, 4});
  BUILD(r, Reshape(ctx, a, {3, 2, 4}));
  EXPECT_EQ(r->op, Op::kReshape);
  ExpectNe(r, 3, 2, 4, 1);
  ExpectNb(r, 4, 12, 24, 96);
  EXPECT_EQ(r->view_src, a);
  EXPECT_EQ(r->src[0], a);
  BUILD(v, View(ctx, a, {6, 2}, {24}, 48));
  BUILD(rv, Reshape(ctx, v, {12}));
  EXPECT_EQ(rv->view_src, a);
  EXPECT_EQ(rv->view_offs, 48u);
}

TEST(OpsTest, PermuteMovesAxisIToAxesI) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {2, 3, 4, 5});  // nb 4, 8, 24, 96
  BUILD(p, Permute(ctx, a, 2, 0, 1, 3));
  EXPECT_EQ(p->op, Op::kPermute);
  ExpectNe(p, 3, 4, 2, 5);
  ExpectNb(p, 8, 24, 4, 96);
  EXPECT_EQ(p->op_params[0], 2);
  EXPECT_EQ(p->op_params[1], 0);
  EXPECT_EQ(p->op_params[2], 1);
  EXPECT_EQ(p->op_params[3], 3);
  EXPECT_EQ(p->view_src, a);
  Tensor* q = New(ctx, Type::kQ8_0, {32, 3, 4});
  BUILD(pq, Permute(ctx, q, 0, 2, 1, 3));
  ExpectNe(pq, 32, 4, 3, 1);
}

TEST(OpsTest, TransposeSwapsAxes01) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {2, 3, 4});
  BUILD(t, Transpose(ctx, a));
  EXPECT_EQ(t->op, Op::kTranspose);
  ExpectNe(t, 3, 2, 4, 1);
  ExpectNb(t, 8, 4, 24, 96);
  EXPECT_EQ(t->op_params[0], 1);
  EXPECT_EQ(t->op_params[1], 0);
  EXPECT_EQ(t->op_params[2], 2);
  EXPECT_EQ(t->op_params[3], 3);
  EXPECT_TRUE(t->IsTransposed());
}

TEST(OpsTest, SoftMaxWithBroadcastMask) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {16, 5, 4, 2});
  Tensor* mask = New(ctx, Type::kF16, {16, 8, 1, 2});
  BUILD(r, SoftMax(ctx, a, mask, 0.125f, 8.0f));
  EXPECT_EQ(r->op, Op::kSoftMax);
  ExpectNe(r, 16, 5, 4, 2);
  EXPECT_EQ(r->param<float>(0), 0.125f);
  EXPECT_EQ(r->param<float>(1), 8.0f);
  EXPECT_EQ(r->src[1], mask);
  BUILD(n, SoftMax(ctx, a, nullptr, 1.0f, 0.0f));
  EXPECT_EQ(n->src[1], nullptr);
}

TEST(OpsTest, RopeStoresGgmlParamLayout) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF16, {64, 8, 5});
  Tensor* pos = New(ctx, Type::kI32, {5});
  RopeParams p;
  p.n_dims = 32;
  p.mode = kRopeNeox;
  p.n_ctx_orig = 4096;
  p.freq_base = 500000.0f;
  p.freq_scale = 0.5f;
  p.ext_factor = 1.0f;
  p.attn_factor = 0.9f;
  p.beta_fast = 30.0f;
  p.beta_slow = 2.0f;
  BUILD(r, Rope(ctx, a, pos, p));
  EXPECT_EQ(r->op, Op::kRope);
  EXPECT_EQ(r->type, Type::kF16);
  ExpectNe(r, 64, 8, 5, 1);
  EXPECT_EQ(r->op_params[0], 0);
  EXPECT_EQ(r->op_params[1], 32);
  EXPECT_EQ(r->op_params[2], kRopeNeox);
  EXPECT_EQ(r->op_params[3], 0);
  EXPECT_EQ(r->op_params[4], 4096);
  EXPECT_EQ(r->param<float>(5), 500000.0f);
  EXPECT_EQ(r->param<float>(6), 0.5f);
  EXPECT_EQ(r->param<float>(7), 1.0f);
  EXPECT_EQ(r->param<float>(8), 0.9f);
  EXPECT_EQ(r->param<float>(9), 30.0f);
  EXPECT_EQ(r->param<float>(10), 2.0f);
  EXPECT_EQ(r->src[1], pos);
  EXPECT_EQ(r->src[2], nullptr);
}

TEST(OpsTest, SetRowsTakesF16RowsAndI64Indices) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF16, {8, 10});
  BUILD(r, SetRows(ctx, a, New(ctx, Type::kF16, {8, 4}),
                   New(ctx, Type::kI64, {4})));
  EXPECT_EQ(r->op, Op::kSetRows);
  EXPECT_TRUE(ValidateNode(*r).ok());
}

TEST(OpsTest, RopeTakesABatchDimension) {
  Context ctx;
  RopeParams p;
  p.n_dims = 8;
  BUILD(r, Rope(ctx, New(ctx, Type::kF32, {8, 2, 3, 5}),
                New(ctx, Type::kI32, {3}), p));
  EXPECT_EQ(r->ne[3], 5);
  EXPECT_TRUE(ValidateNode(*r).ok());
}

TEST(OpsTest, RopeTakesFreqFactors) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {64, 8, 5});
  Tensor* pos = New(ctx, Type::kI32, {5});
  RopeParams p;
  p.n_dims = 32;
  BUILD(r, Rope(ctx, a, pos, p, New(ctx, Type::kF32, {16})));
  EXPECT_EQ(r->src[2]->ne[0], 16);
  EXPECT_FALSE(Rope(ctx, a, pos, p, New(ctx, Type::kF32, {15})).ok());
  EXPECT_FALSE(Rope(ctx, a, pos, p, New(ctx, Type::kF16, {16})).ok());
  EXPECT_FALSE(Rope(ctx, a, pos, p, New(ctx, Type::kF32, {16, 2})).ok());
}

TEST(OpsTest, ConcatAlongEachDim) {
  Context ctx;
  for (int dim = 0; dim < 4; ++dim) {
    std::vector<int64_t> na = {2, 3, 4, 5};
    std::vector<int64_t> nb = na;
    nb[dim] = 7;
    Tensor* a = New(ctx, Type::kI32, na);
    Tensor* b = New(ctx, Type::kI32, nb);
    absl::StatusOr<Tensor*> r = Concat(ctx, a, b, dim);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->op, Op::kConcat);
    EXPECT_EQ((*r)->type, Type::kI32);
    EXPECT_EQ((*r)->op_params[0], dim);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ((*r)->ne[i], i == dim ? na[i] + 7 : na[i]);
    }
  }
}

TEST(OpsTest, ArgsortGivesI32OfSameShape) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {9, 4});
  BUILD(r, Argsort(ctx, a, SortOrder::kDescending));
  EXPECT_EQ(r->op, Op::kArgsort);
  EXPECT_EQ(r->type, Type::kI32);
  ExpectNe(r, 9, 4, 1, 1);
  EXPECT_EQ(r->op_params[0], static_cast<int32_t>(SortOrder::kDescending));
}

TEST(OpsTest, FlashAttnExtPermutedResult) {
  Context ctx;
  Tensor* q = New(ctx, Type::kF32, {64, 7, 8, 2});
  Tensor* k = New(ctx, Type::kF16, {64, 32, 2, 2});
  Tensor* v = New(ctx, Type::kF16, {48, 32, 2, 2});
  Tensor* mask = New(ctx, Type::kF16, {32, 8, 1, 1});
  BUILD(r, FlashAttnExt(ctx, q, k, v, mask, 0.125f, 0.0f, 30.0f));
  EXPECT_EQ(r->op, Op::kFlashAttnExt);
  EXPECT_EQ(r->type, Type::kF32);
  ExpectNe(r, 48, 8, 7, 2);
  EXPECT_EQ(r->param<float>(0), 0.125f);
  EXPECT_EQ(r->param<float>(1), 0.0f);
  EXPECT_EQ(r->param<float>(2), 30.0f);
  EXPECT_EQ(r->src[0], q);
  EXPECT_EQ(r->src[1], k);
  EXPECT_EQ(r->src[2], v);
  EXPECT_EQ(r->src[3], mask);
  BUILD(nm, FlashAttnExt(ctx, q, k, v, nullptr, 1.0f, 0.0f, 0.0f));
  EXPECT_EQ(nm->src[3], nullptr);
}

TEST(OpsTest, EmptyTensorsBuild) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {0, 3});
  Tensor* b = New(ctx, Type::kF32, {0, 1});
  BUILD(r, Add(ctx, a, b));
  ExpectNe(r, 0, 3, 1, 1);
  Tensor* w = New(ctx, Type::kF32, {4, 0});
  Tensor* x = New(ctx, Type::kF32, {4, 2});
  BUILD(m, MulMat(ctx, w, x));
  ExpectNe(m, 0, 2, 1, 1);
}

// --- Rejected inputs, per op ---

struct Rejection {
  std::string what;
  std::function<absl::StatusOr<Tensor*>(Context&)> build;
  std::string tag;  // the "[Op]" prefix the message must carry
};

TEST(OpsTest, RejectsBadInputsWithInvalidArgument) {
  Context ctx;
  auto T = [&ctx](Type type, std::vector<int64_t> ne) {
    return New(ctx, type, ne);
  };
  Tensor* f32 = T(Type::kF32, {8, 4});
  Tensor* f32_3d = T(Type::kF32, {8, 4, 2});
  Tensor* f16 = T(Type::kF16, {8, 4});
  Tensor* i32 = T(Type::kI32, {8, 4});
  Tensor* q8 = T(Type::kQ8_0, {32, 4});
  Tensor* odd = T(Type::kF32, {7, 4});
  Tensor* idx = T(Type::kI32, {3});
  Tensor* transposed = *Transpose(ctx, f32);
  Tensor* bad_type = T(Type::kF32, {8, 4});
  bad_type->type = static_cast<Type>(99);
  Tensor* negative = T(Type::kF32, {8, 4});
  negative->ne[1] = -4;
  RopeParams rope;
  rope.n_dims = 8;

  const std::vector<Rejection> cases = {
      {"dup null", [&](Context& c) { return Dup(c, nullptr); }, "[Dup]"},
      {"dup bad type", [&](Context& c) { return Dup(c, bad_type); }, "[Dup]"},
      {"dup negative dim", [&](Context& c) { return Dup(c, negative); },
       "[Dup]"},
      {"cont null", [&](Context& c) { return Cont(c, nullptr); }, "[Cont]"},
      {"cont as null",
       [&](Context& c) { return ContAs(c, nullptr, {32}); }, "[Cont]"},
      {"cont as count", [&](Context& c) { return ContAs(c, f32, {31}); },
       "[Cont]"},
      {"cont as no dims", [&](Context& c) { return ContAs(c, f32, {}); },
       "[Cont]"},
      {"cont as five dims",
       [&](Context& c) { return ContAs(c, f32, {2, 2, 2, 2, 2}); }, "[Cont]"},
      {"cont as negative",
       [&](Context& c) { return ContAs(c, f32, {-8, -4}); }, "[Cont]"},
      {"cont as partial block",
       [&](Context& c) { return ContAs(c, q8, {16, 8}); }, "[Cont]"},
      {"cpy null", [&](Context& c) { return Cpy(c, f32, nullptr); }, "[Cpy]"},
      {"cpy count", [&](Context& c) { return Cpy(c, f32, f32_3d); }, "[Cpy]"},
      {"cpy q->f16",
       [&](Context& c) { return Cpy(c, q8, T(Type::kF16, {128})); }, "[Cpy]"},
      {"add null", [&](Context& c) { return Add(c, nullptr, f32); }, "[Add]"},
      {"add broadcast", [&](Context& c) { return Add(c, f32, odd); }, "[Add]"},
      {"add reverse broadcast", [&](Context& c) { return Add(c, f32, f32_3d); },
       "[Add]"},
      {"sub int", [&](Context& c) { return Sub(c, i32, i32); }, "[Sub]"},
      {"mul quantized", [&](Context& c) { return Mul(c, q8, q8); }, "[Mul]"},
      {"div b type", [&](Context& c) { return Div(c, f32, f16); }, "[Div]"},
      {"scale int", [&](Context& c) { return Scale(c, i32, 2.0f); }, "[Scale]"},
      {"sqr quantized", [&](Context& c) { return Sqr(c, q8); }, "[Sqr]"},
      {"sqrt null", [&](Context& c) { return Sqrt(c, nullptr); }, "[Sqrt]"},
      {"log int", [&](Context& c) { return Log(c, i32); }, "[Log]"},
      {"sum_rows f16", [&](Context& c) { return SumRows(c, f16); },
       "[SumRows]"},
      {"mean null", [&](Context& c) { return Mean(c, nullptr); }, "[Mean]"},
      {"argmax 3d", [&](Context& c) { return Argmax(c, f32_3d); }, "[Argmax]"},
      {"argmax f16", [&](Context& c) { return Argmax(c, f16); }, "[Argmax]"},
      {"unary bad op",
       [&](Context& c) { return Unary(c, f32, static_cast<UnaryOp>(42)); },
       "[Unary]"},
      {"unary int", [&](Context& c) { return Unary(c, i32, UnaryOp::kRelu); },
       "[Unary"},
      {"glu shape",
       [&](Context& c) { return Glu(c, f32, f32_3d, GluOp::kSwiGlu); }, "[Glu"},
      {"glu type", [&](Context& c) { return Glu(c, f32, f16, GluOp::kSwiGlu); },
       "[Glu"},
      {"glu bad op",
       [&](Context& c) { return Glu(c, f32, f32, static_cast<GluOp>(-1)); },
       "[Glu]"},
      {"glu split odd",
       [&](Context& c) { return GluSplit(c, odd, GluOp::kGeGlu); },
       "[GluSplit"},
      {"norm negative eps", [&](Context& c) { return Norm(c, f32, -1.0f); },
       "[Norm]"},
      {"rms_norm nan eps",
       [&](Context& c) { return RmsNorm(c, f32, std::nanf("")); }, "[RmsNorm]"},
      {"rms_norm f16", [&](Context& c) { return RmsNorm(c, f16, 0.0f); },
       "[RmsNorm]"},
      {"mul_mat k", [&](Context& c) { return MulMat(c, f32, odd); },
       "[MulMat]"},
      {"mul_mat b f16",
       [&](Context& c) {
         return MulMat(c, f32, T(Type::kF16, {8, 2}));
       },
       "[MulMat]"},
      {"mul_mat broadcast",
       [&](Context& c) {
         return MulMat(c, T(Type::kF32, {8, 4, 2}), T(Type::kF32, {8, 3, 3}));
       },
       "[MulMat]"},
      {"mul_mat transposed a",
       [&](Context& c) {
         return MulMat(c, transposed, T(Type::kF32, {4, 2}));
       },
       "[MulMat]"},
      {"get_rows f32 index", [&](Context& c) { return GetRows(c, f32, f32); },
       "[GetRows]"},
      {"get_rows index dims",
       [&](Context& c) {
         return GetRows(c, f32, T(Type::kI32, {3, 2}));
       },
       "[GetRows]"},
      {"set_rows i32 dst",
       [&](Context& c) { return SetRows(c, i32, f32, T(Type::kI32, {4})); },
       "[SetRows]"},
      {"set_rows bf16 src",
       [&](Context& c) {
         return SetRows(c, f32, T(Type::kBF16, {8, 4}), T(Type::kI32, {4}));
       },
       "[SetRows]"},
      {"set_rows index count",
       [&](Context& c) { return SetRows(c, f32, f32, idx); }, "[SetRows]"},
      {"set_rows index type",
       [&](Context& c) { return SetRows(c, f32, f32, f32); }, "[SetRows]"},
      {"set_rows row size",
       [&](Context& c) {
         return SetRows(c, f32, T(Type::kF32, {4, 4}), T(Type::kI32, {4}));
       },
       "[SetRows]"},
      {"view out of bounds",
       [&](Context& c) {
         return View(c, f32, {8, 4}, {32}, 4);
       },
       "[View]"},
      {"view huge stride",
       [&](Context& c) {
         return View(c, f32, {8, 2}, {~size_t{0}}, 0);
       },
       "[View]"},
      {"view stride count",
       [&](Context& c) {
         return View(c, f32, {8, 2}, {32, 64}, 0);
       },
       "[View]"},
      {"view no dims", [&](Context& c) { return View(c, f32, {}, {}, 0); },
       "[View]"},
      {"view partial block",
       [&](Context& c) { return View(c, q8, {16}, {}, 0); }, "[View]"},
      {"view negative", [&](Context& c) { return View(c, f32, {-1}, {}, 0); },
       "[View]"},
      {"reshape count",
       [&](Context& c) {
         return Reshape(c, f32, {5, 5});
       },
       "[Reshape]"},
      {"reshape strided",
       [&](Context& c) { return Reshape(c, transposed, {32}); }, "[Reshape]"},
      {"reshape partial block",
       [&](Context& c) {
         return Reshape(c, q8, {16, 8});
       },
       "[Reshape]"},
      {"permute repeated",
       [&](Context& c) { return Permute(c, f32, 0, 0, 1, 2); }, "[Permute]"},
      {"permute range", [&](Context& c) { return Permute(c, f32, 0, 1, 2, 4); },
       "[Permute]"},
      {"permute quantized axis 0",
       [&](Context& c) { return Permute(c, q8, 1, 0, 2, 3); }, "[Permute]"},
      {"transpose quantized", [&](Context& c) { return Transpose(c, q8); },
       "[Transpose]"},
      {"soft_max f16",
       [&](Context& c) { return SoftMax(c, f16, nullptr, 1, 0); }, "[SoftMax]"},
      {"soft_max mask width",
       [&](Context& c) { return SoftMax(c, f32, odd, 1, 0); }, "[SoftMax]"},
      {"soft_max mask rows",
       [&](Context& c) {
         return SoftMax(c, f32, T(Type::kF16, {8, 3}), 1, 0);
       },
       "[SoftMax]"},
      {"soft_max mask type",
       [&](Context& c) { return SoftMax(c, f32, i32, 1, 0); }, "[SoftMax]"},
      {"soft_max mask broadcast",
       [&](Context& c) {
         return SoftMax(c, f32_3d, T(Type::kF16, {8, 4, 3}), 1, 0);
       },
       "[SoftMax]"},
      {"soft_max alibi without mask",
       [&](Context& c) { return SoftMax(c, f32, nullptr, 1, 8); }, "[SoftMax]"},
      {"rope bf16",
       [&](Context& c) {
         return Rope(c, T(Type::kBF16, {8, 2, 3}), idx, rope);
       },
       "[Rope]"},
      {"rope positions",
       [&](Context& c) {
         return Rope(c, T(Type::kF32, {8, 2, 4}), idx, rope);
       },
       "[Rope]"},
      {"rope pos type",
       [&](Context& c) {
         return Rope(c, T(Type::kF32, {8, 2, 3}), T(Type::kF32, {3}), rope);
       },
       "[Rope]"},
      {"rope n_dims odd",
       [&](Context& c) {
         RopeParams p = rope;
         p.n_dims = 5;
         return Rope(c, T(Type::kF32, {8, 2, 3}), idx, p);
       },
       "[Rope]"},
      {"rope n_dims too big",
       [&](Context& c) {
         RopeParams p = rope;
         p.n_dims = 10;
         return Rope(c, T(Type::kF32, {8, 2, 3}), idx, p);
       },
       "[Rope]"},
      {"rope mode",
       [&](Context& c) {
         RopeParams p = rope;
         p.mode = 1;
         return Rope(c, T(Type::kF32, {8, 2, 3}), idx, p);
       },
       "[Rope]"},
      {"concat dim", [&](Context& c) { return Concat(c, f32, f32, 4); },
       "[Concat]"},
      {"concat types", [&](Context& c) { return Concat(c, f32, f16, 0); },
       "[Concat]"},
      {"concat quantized", [&](Context& c) { return Concat(c, q8, q8, 1); },
       "[Concat]"},
      {"concat shapes", [&](Context& c) { return Concat(c, f32, odd, 1); },
       "[Concat]"},
      {"argsort order",
       [&](Context& c) { return Argsort(c, f32, static_cast<SortOrder>(3)); },
       "[Argsort]"},
      {"argsort i32",
       [&](Context& c) { return Argsort(c, i32, SortOrder::kAscending); },
       "[Argsort]"},
      {"flash head size",
       [&](Context& c) {
         return FlashAttnExt(c, T(Type::kF32, {64, 4, 8}),
                             T(Type::kF16, {32, 16, 2}),
                             T(Type::kF16, {32, 16, 2}), nullptr, 1, 0, 0);
       },
       "[FlashAttnExt]"},
      {"flash gqa",
       [&](Context& c) {
         return FlashAttnExt(c, T(Type::kF32, {64, 4, 8}),
                             T(Type::kF16, {64, 16, 3}),
                             T(Type::kF16, {64, 16, 3}), nullptr, 1, 0, 0);
       },
       "[FlashAttnExt]"},
      {"flash kv length",
       [&](Context& c) {
         return FlashAttnExt(c, T(Type::kF32, {64, 4, 8}),
                             T(Type::kF16, {64, 16, 2}),
                             T(Type::kF16, {64, 15, 2}), nullptr, 1, 0, 0);
       },
       "[FlashAttnExt]"},
      {"flash q type",
       [&](Context& c) {
         return FlashAttnExt(c, T(Type::kF16, {64, 4, 8}),
                             T(Type::kF16, {64, 16, 2}),
                             T(Type::kF16, {64, 16, 2}), nullptr, 1, 0, 0);
       },
       "[FlashAttnExt]"},
      {"flash mask short",
       [&](Context& c) {
         return FlashAttnExt(
             c, T(Type::kF32, {64, 4, 8}), T(Type::kF16, {64, 16, 2}),
             T(Type::kF16, {64, 16, 2}), T(Type::kF16, {16, 3}), 1, 0, 0);
       },
       "[FlashAttnExt]"},
      {"flash alibi without mask",
       [&](Context& c) {
         return FlashAttnExt(c, T(Type::kF32, {64, 4, 8}),
                             T(Type::kF16, {64, 16, 2}),
                             T(Type::kF16, {64, 16, 2}), nullptr, 1, 2, 0);
       },
       "[FlashAttnExt]"},
      {"flash null v",
       [&](Context& c) {
         return FlashAttnExt(c, T(Type::kF32, {64, 4, 8}),
                             T(Type::kF16, {64, 16, 2}), nullptr, nullptr, 1, 0,
                             0);
       },
       "[FlashAttnExt]"},
  };
  for (const Rejection& r : cases) {
    absl::StatusOr<Tensor*> got = r.build(ctx);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument)
        << r.what;
    EXPECT_NE(got.status().message().find(r.tag), std::string_view::npos)
        << r.what << ": " << got.status();
  }
}

TEST(OpsTest, ErrorMessagesNameTheProblem) {
  Context ctx;
  Tensor* a = New(ctx, Type::kF32, {4, 2});
  Tensor* b = New(ctx, Type::kF32, {3, 2});
  absl::Status s = Add(ctx, a, b).status();
  EXPECT_EQ(s.message(),
            "[Add] b [3, 2, 1, 1] does not broadcast to a "
            "[4, 2, 1, 1]");
  EXPECT_EQ(Mul(ctx, nullptr, b).status().message(), "[Mul] a is null");
}

// --- ValidateNode ---

// One node of every op, built from valid inputs.
std::vector<Tensor*> BuildAllOps(Context& ctx) {
  auto T = [&ctx](Type type, std::vector<int64_t> ne) {
    return *ctx.NewTensor(type, ne);
  };
  Tensor* a = T(Type::kF32, {8, 4, 3});
  Tensor* b = T(Type::kF32, {8, 1, 3});
  Tensor* h = T(Type::kF16, {8, 4, 3});
  Tensor* q = T(Type::kQ8_0, {32, 6});
  Tensor* idx = T(Type::kI32, {3});
  Tensor* mat = T(Type::kF32, {8, 4});
  RopeParams rope;
  rope.n_dims = 8;
  rope.freq_scale = 0.25f;
  Tensor* view = *View(ctx, a, {8, 2}, {32}, 32);
  std::vector<Tensor*> out = {
      *Dup(ctx, a),
      *Cpy(ctx, a, h),
      *Cpy(ctx, T(Type::kF32, {32, 6}), q),
      *Cont(ctx, *Transpose(ctx, a)),
      *Add(ctx, a, b),
      *Sub(ctx, h, b),
      *Mul(ctx, a, b),
      *Div(ctx, h, h),
      *Scale(ctx, a, 0.5f, 1.0f),
      *Sqr(ctx, a),
      *Sqrt(ctx, h),
      *Log(ctx, a),
      *SumRows(ctx, a),
      *Mean(ctx, a),
      *Argmax(ctx, mat),
      *Unary(ctx, a, UnaryOp::kGelu),
      *Glu(ctx, a, a, GluOp::kSwiGlu),
      *GluSplit(ctx, a, GluOp::kGeGlu, true),
      *Norm(ctx, a, 1e-6f),
      *RmsNorm(ctx, a, 1e-5f),
      *MulMat(ctx, q, T(Type::kF32, {32, 5})),
      *GetRows(ctx, q, idx),
      *SetRows(ctx, h, T(Type::kF32, {8, 2, 3}), T(Type::kI32, {2, 3})),
      *SetRows(ctx, view, T(Type::kF32, {8, 1}), T(Type::kI32, {1})),
      view,
      *View(ctx, view, {4}, {}, 4),
      *Reshape(ctx, a, {32, 3}),
      *Reshape(ctx, view, {16}),
      *Permute(ctx, a, 1, 2, 0, 3),
      *Transpose(ctx, view),
      *SoftMax(ctx, a, T(Type::kF16, {8, 4}), 0.5f, 2.0f),
      *Rope(ctx, T(Type::kF32, {8, 2, 3}), idx, rope),
      *Concat(ctx, a, b, 1),
      *Argsort(ctx, a, SortOrder::kDescending),
      *FlashAttnExt(ctx, T(Type::kF32, {8, 5, 4}), T(Type::kF16, {8, 6, 2}),
                    T(Type::kF16, {3, 6, 2}), T(Type::kF16, {6, 5}), 0.3f, 1.0f,
                    20.0f),
  };
  return out;
}

TEST(OpsTest, ValidateNodeAcceptsEveryBuilderOutput) {
  Context ctx;
  const std::vector<Tensor*> nodes = BuildAllOps(ctx);
  std::vector<bool> seen(kOpCount, false);
  for (Tensor* n : nodes) {
    EXPECT_TRUE(ValidateNode(*n).ok())
        << OpName(n->op) << ": " << ValidateNode(*n);
    seen[static_cast<int>(n->op)] = true;
  }
  for (int op = 1; op < kOpCount; ++op) {
    EXPECT_TRUE(seen[op]) << OpName(static_cast<Op>(op)) << " not covered";
  }
  Tensor* leaf = *ctx.NewTensor(Type::kF32, {4});
  EXPECT_TRUE(ValidateNode(*leaf).ok());
}

// Copies `node` into a tensor of its own, applies `tamper` and validates it.
absl::Status Tampered(Context& ctx, const Tensor& node,
                      const std::function<void(Tensor&)>& tamper) {
  Tensor* t = ctx.NewTensorLike(node);
  tamper(*t);
  return ValidateNode(*t);
}

TEST(OpsTest, ValidateNodeRejectsTamperedNodes) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(Type::kF32, {8, 4});
  Tensor* b = *ctx.NewTensor(Type::kF32, {8, 1});
  Tensor* add = *Add(ctx, a, b);
  add->name = "sum";
  auto expect_invalid = [&](const Tensor& node, const char* what,
                            const std::function<void(Tensor&)>& tamper) {
    absl::Status s = Tampered(ctx, node, tamper);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find("[ValidateNode"), std::string_view::npos)
        << what << ": " << s;
  };
  expect_invalid(*add, "shape", [](Tensor& t) { t.ne[1] = 5; });
  expect_invalid(*add, "type", [](Tensor& t) { t.type = Type::kF16; });
  expect_invalid(*add, "strides", [](Tensor& t) { t.nb[1] = 64; });
  expect_invalid(*add, "op params", [](Tensor& t) { t.op_params[3] = 1; });
  expect_invalid(*add, "extra source", [&](Tensor& t) { t.src[2] = a; });
  expect_invalid(*add, "swapped sources", [&](Tensor& t) {
    t.src[0] = b;
    t.src[1] = a;
  });
  expect_invalid(*add, "made a view", [&](Tensor& t) { t.view_src = a; });
  expect_invalid(*add, "other op", [](Tensor& t) { t.op = Op::kMulMat; });

  absl::Status named = Tampered(ctx, *add, [](Tensor& t) { t.ne[1] = 5; });
  EXPECT_NE(named.message().find("sum f32 [8, 5, 1, 1]"),
            std::string_view::npos)
      << named;

  Tensor* view = *View(ctx, a, {8, 2}, {32}, 32);
  expect_invalid(*view, "view offset", [](Tensor& t) { t.view_offs = 0; });
  expect_invalid(*view, "view offset param",
                 [](Tensor& t) { t.op_params[0] = 64; });
  expect_invalid(*view, "view out of bounds",
                 [](Tensor& t) { t.op_params[0] = 1 << 30; });
  expect_invalid(*view, "view huge offset", [](Tensor& t) {
    t.op_params[1] = -1;
    t.view_offs = ~size_t{0};
  });
  expect_invalid(*view, "view of a view",
                 [&](Tensor& t) { t.view_src = *View(ctx, a, {8}, {}, 0); });
  Tensor* set_rows = *SetRows(ctx, a, b, *ctx.NewTensor(Type::kI32, {1}));
  expect_invalid(*set_rows, "set_rows not a view",
                 [](Tensor& t) { t.view_src = nullptr; });
  expect_invalid(*set_rows, "set_rows out of bounds",
                 [](Tensor& t) { t.view_offs = 64; });
  Tensor* unary = *Unary(ctx, a, UnaryOp::kRelu);
  expect_invalid(*unary, "unary op", [](Tensor& t) { t.op_params[0] = 7; });
  Tensor* split = *GluSplit(ctx, a, GluOp::kSwiGlu);
  expect_invalid(*split, "glu swapped 2",
                 [](Tensor& t) { t.op_params[1] = 2; });
  Tensor* pos = *ctx.NewTensor(Type::kI32, {1});
  RopeParams rp;
  rp.n_dims = 8;
  Tensor* rope = *Rope(ctx, *ctx.NewTensor(Type::kF32, {8, 4, 1}), pos, rp);
  expect_invalid(*rope, "rope n_ctx", [](Tensor& t) { t.op_params[3] = 5; });
  expect_invalid(*rope, "rope n_dims", [](Tensor& t) { t.op_params[1] = 7; });
  Tensor* rope_ff = *Rope(ctx, *ctx.NewTensor(Type::kF32, {8, 4, 1}), pos, rp,
                          *ctx.NewTensor(Type::kF32, {4}));
  EXPECT_TRUE(ValidateNode(*rope_ff).ok()) << ValidateNode(*rope_ff);
  Tensor* short_factors = *ctx.NewTensor(Type::kF32, {3});
  Tensor* f16_factors = *ctx.NewTensor(Type::kF16, {4});
  expect_invalid(*rope_ff, "rope freq_factors short",
                 [&](Tensor& t) { t.src[2] = short_factors; });
  expect_invalid(*rope_ff, "rope freq_factors f16",
                 [&](Tensor& t) { t.src[2] = f16_factors; });
}

TEST(OpsTest, ValidateNodeSurvivesGarbage) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(Type::kF32, {8, 4});
  Tensor* node = *Sqr(ctx, a);
  auto expect_invalid = [&](const char* what,
                            const std::function<void(Tensor&)>& tamper) {
    absl::Status s = Tampered(ctx, *node, tamper);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
  };
  expect_invalid("op", [](Tensor& t) { t.op = static_cast<Op>(1000); });
  expect_invalid("negative op", [](Tensor& t) { t.op = static_cast<Op>(-1); });
  expect_invalid("type", [](Tensor& t) { t.type = static_cast<Type>(77); });
  expect_invalid("negative ne", [](Tensor& t) { t.ne[2] = -1; });
  expect_invalid("huge ne", [](Tensor& t) {
    t.ne[0] = t.ne[1] = t.ne[2] = t.ne[3] = int64_t{1} << 40;
  });
  expect_invalid("null source", [](Tensor& t) { t.src[0] = nullptr; });

  Tensor* bad_src = ctx.NewTensorLike(*a);
  bad_src->type = static_cast<Type>(-5);
  expect_invalid("source type", [&](Tensor& t) { t.src[0] = bad_src; });
  Tensor* neg_src = ctx.NewTensorLike(*a);
  neg_src->ne[1] = std::numeric_limits<int64_t>::min();
  expect_invalid("source ne", [&](Tensor& t) { t.src[0] = neg_src; });

  // Garbage op_params for every op that reads them.
  const struct {
    Op op;
    int index;
    int32_t value;
  } params[] = {
      {Op::kUnary, 0, -3},
      {Op::kUnary, 0, 1 << 30},
      {Op::kGlu, 0, 9},
      {Op::kGlu, 1, -1},
      {Op::kPermute, 0, 9},
      {Op::kPermute, 2, -1},
      {Op::kTranspose, 0, 0},
      {Op::kRope, 1, -8},
      {Op::kRope, 1, 1 << 30},
      {Op::kRope, 2, 77},
      {Op::kConcat, 0, 4},
      {Op::kConcat, 0, -1},
      {Op::kArgsort, 0, 2},
      {Op::kView, 1, 0x7fffffff},
      {Op::kView, 0, -1},
      {Op::kNorm, 0, -1},
      {Op::kRmsNorm, 0, 0x7fc00000},  // NaN eps
  };
  for (const auto& p : params) {
    absl::Status s = Tampered(ctx, *node, [&](Tensor& t) {
      t.op = p.op;
      t.op_params[p.index] = p.value;
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << OpName(p.op) << " op_params[" << p.index << "] = " << p.value;
  }
  // Every op with sources that do not fit it, or none at all.
  for (int op = 1; op < kOpCount; ++op) {
    for (Tensor* src : {static_cast<Tensor*>(nullptr), a}) {
      absl::Status s = Tampered(ctx, *node, [&](Tensor& t) {
        t.op = static_cast<Op>(op);
        for (Tensor*& x : t.src) x = src;
      });
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
          << OpName(static_cast<Op>(op));
    }
  }
}

TEST(OpsTest, ValidateNodeRejectsLeafWithSources) {
  Context ctx;
  Tensor* a = *ctx.NewTensor(Type::kF32, {8});
  Tensor* leaf = *ctx.NewTensor(Type::kF32, {8});
  leaf->src[0] = a;
  EXPECT_EQ(ValidateNode(*leaf).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
