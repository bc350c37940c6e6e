#include "graph/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "graph/context.h"
#include "graph/ops.h"
#include "graph/tensor.h"
#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Element (i0, i1, i2, i3) of `t` through its strides.
char* At(const Tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return static_cast<char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] +
         i2 * t->nb[2] + i3 * t->nb[3];
}

// Writes `values` in row-major order through the strides of `t`, converting
// to its type.
void SetValues(Tensor* t, const std::vector<float>& values) {
  ASSERT_EQ(static_cast<int64_t>(values.size()), t->NumElements());
  int64_t f = 0;
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1) {
        if (Traits(t->type).is_quantized) {
          RowFromFloat(t->type, &values[f], At(t, 0, i1, i2, i3), t->ne[0]);
          f += t->ne[0];
          continue;
        }
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0, ++f) {
          char* p = At(t, i0, i1, i2, i3);
          const float v = values[f];
          if (t->type == Type::kF32) {
            std::memcpy(p, &v, 4);
          } else if (t->type == Type::kI32) {
            const int32_t i = static_cast<int32_t>(v);
            std::memcpy(p, &i, 4);
          } else {
            const uint16_t h =
                t->type == Type::kF16 ? Fp32ToFp16(v) : Fp32ToBf16(v);
            std::memcpy(p, &h, 2);
          }
        }
      }
    }
  }
}

// Reads `t` in row-major order through its strides as floats.
std::vector<float> Values(const Tensor* t) {
  std::vector<float> out;
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1) {
        if (Traits(t->type).is_quantized) {
          std::vector<float> row(t->ne[0]);
          RowToFloat(t->type, At(t, 0, i1, i2, i3), row.data(), t->ne[0]);
          out.insert(out.end(), row.begin(), row.end());
          continue;
        }
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
          const char* p = At(t, i0, i1, i2, i3);
          if (t->type == Type::kF32) {
            float v;
            std::memcpy(&v, p, 4);
            out.push_back(v);
          } else if (t->type == Type::kI32) {
            int32_t v;
            std::memcpy(&v, p, 4);
            out.push_back(static_cast<float>(v));
          } else {
            uint16_t h;
            std::memcpy(&h, p, 2);
            out.push_back(t->type == Type::kF16 ? Fp16ToFp32(h)
                                                : Bf16ToFp32(h));
          }
        }
      }
    }
  }
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
  }
}

// Owns the tensors and host memory of one test; builds with the ops
// builders and computes with ReferenceCompute.
class ReferenceTest : public ::testing::Test {
 protected:
  // A new tensor with zeroed data, or `values` when given.
  Tensor* New(Type type, std::vector<int64_t> ne,
              const std::vector<float>& values = {}) {
    absl::StatusOr<Tensor*> t = ctx_.NewTensor(type, ne);
    EXPECT_TRUE(t.ok()) << t.status();
    Allocate(*t);
    if (!values.empty()) SetValues(*t, values);
    return *t;
  }

  Tensor* Must(absl::StatusOr<Tensor*> t) {
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }

  // Gives `t` and what it reads data: a zeroed block for tensors that own
  // memory, the aliased address for views. Data already set is kept.
  void Allocate(Tensor* t) {
    if (t == nullptr || t->data != nullptr) return;
    for (Tensor* s : t->src) Allocate(s);
    if (t->view_src != nullptr) {
      Allocate(t->view_src);
      t->data = static_cast<char*>(t->view_src->data) + t->view_offs;
      return;
    }
    blocks_.push_back(std::make_unique<std::vector<uint8_t>>(
        std::max<size_t>(t->NumBytes(), 1)));
    t->data = blocks_.back()->data();
  }

  // Allocates `node` and runs parts ith = 0..nth-1 of it.
  absl::Status Compute(Tensor* node, int nth = 1) {
    Allocate(node);
    for (int ith = 0; ith < nth; ++ith) {
      absl::Status s = ReferenceCompute(*node, ith, nth);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Computes `node` and returns its values.
  std::vector<float> Run(Tensor* node, int nth = 1) {
    absl::Status s = Compute(node, nth);
    EXPECT_TRUE(s.ok()) << s;
    return Values(node);
  }

  Context ctx_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> blocks_;
};

std::vector<float> Iota(int64_t n, float start, float step) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * i;
  return v;
}

// ---------------------------------------------------------------------------
// Copies.

TEST_F(ReferenceTest, ContOfTransposeIsTheTransposedMatrix) {
  Tensor* a = New(Type::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor* t = Must(Cont(ctx_, Must(Transpose(ctx_, a))));
  EXPECT_EQ(t->ne[0], 2);
  EXPECT_EQ(t->ne[1], 3);
  EXPECT_EQ(Run(t), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST_F(ReferenceTest, DupCopiesQuantizedBlocksExactly) {
  Tensor* a = New(Type::kQ4_0, {64, 2}, Iota(128, -3.0f, 0.11f));
  Tensor* d = Must(Dup(ctx_, a));
  ASSERT_TRUE(Compute(d).ok());
  EXPECT_EQ(std::memcmp(a->data, d->data, a->NumBytes()), 0);
}

TEST_F(ReferenceTest, CpyConvertsBetweenFloatTypesAndI32) {
  Tensor* a = New(Type::kF32, {4}, {1.5f, -2.75f, 3.0f, 65504.0f});
  Tensor* h = New(Type::kF16, {4});
  EXPECT_EQ(Run(Must(Cpy(ctx_, a, h))),
            (std::vector<float>{1.5f, -2.75f, 3.0f, 65504.0f}));

  Tensor* i = New(Type::kI32, {2, 2});
  EXPECT_EQ(Run(Must(Cpy(ctx_, a, i))),
            (std::vector<float>{1, -2, 3, 65504}));  // truncates toward zero

  Tensor* back = New(Type::kF32, {4});
  EXPECT_EQ(Run(Must(Cpy(ctx_, i, back))),
            (std::vector<float>{1, -2, 3, 65504}));
}

TEST_F(ReferenceTest, CpyIntoTransposedViewWritesThroughStrides) {
  Tensor* a = New(Type::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor* b = New(Type::kF32, {3, 2});
  Tensor* bt = Must(Transpose(ctx_, b));  // [2, 3] view of b
  ASSERT_TRUE(Compute(Must(Cpy(ctx_, a, bt))).ok());
  // bt[i0, i1] = a[i0, i1] and bt[i0, i1] is b[i1, i0].
  EXPECT_EQ(Values(b), (std::vector<float>{1, 3, 5, 2, 4, 6}));
}

TEST_F(ReferenceTest, CpyBetweenShapesFollowsRowMajorOrder) {
  // The transposed view of [[1, 2, 3], [4, 5, 6]] reads 1, 4, 2, 5, 3, 6.
  Tensor* a = New(Type::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor* at = Must(Transpose(ctx_, a));
  const std::vector<float> want = {1, 4, 2, 5, 3, 6};
  Tensor* same_type = New(Type::kF32, {6});
  EXPECT_EQ(Run(Must(Cpy(ctx_, at, same_type))), want);
  Tensor* f16 = New(Type::kF16, {3, 2});
  EXPECT_EQ(Run(Must(Cpy(ctx_, at, f16))), want);
  Tensor* i32 = New(Type::kI32, {1, 3, 2});
  EXPECT_EQ(Run(Must(Cpy(ctx_, at, i32))), want);
}

TEST_F(ReferenceTest, CpyQuantizesToQ8_0AndDequantizes) {
  // x = i - 16: absmax 16, d = 16 / 127, q = round(x / d).
  std::vector<float> x = Iota(32, -16.0f, 1.0f);
  Tensor* a = New(Type::kF32, {32}, x);
  Tensor* q = New(Type::kQ8_0, {32});
  ASSERT_TRUE(Compute(Must(Cpy(ctx_, a, q))).ok());
  BlockQ8_0 block;
  std::memcpy(&block, q->data, sizeof(block));
  EXPECT_EQ(block.d, Fp32ToFp16(16.0f / 127.0f));
  const float d = Fp16ToFp32(block.d);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(block.qs[i], static_cast<int>(std::round(x[i] * 127.0f / 16.0f)))
        << i;
  }

  Tensor* back = New(Type::kF32, {32});
  std::vector<float> got = Run(Must(Cpy(ctx_, q, back)));
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(got[i], block.qs[i] * d);
}

TEST_F(ReferenceTest, CpyQuantizesToQ4_0WithinHalfAStep) {
  std::vector<float> x = Iota(64, -4.0f, 0.13f);
  Tensor* a = New(Type::kF32, {64}, x);
  Tensor* q = New(Type::kQ4_0, {64});
  Tensor* back = New(Type::kF32, {64});
  ASSERT_TRUE(Compute(Must(Cpy(ctx_, a, q))).ok());
  std::vector<float> got = Run(Must(Cpy(ctx_, q, back)));
  for (int b = 0; b < 2; ++b) {
    float max = 0;  // the value of largest magnitude, with its sign
    for (int i = 0; i < 32; ++i) {
      if (std::fabs(x[32 * b + i]) > std::fabs(max)) max = x[32 * b + i];
    }
    const float step = std::fabs(max / 8.0f);
    for (int i = 0; i < 32; ++i) {
      EXPECT_NEAR(got[32 * b + i], x[32 * b + i], step * 0.5f + 1e-2f)
          << b << " " << i;
    }
  }
}

TEST_F(ReferenceTest, CpyRejectsQuantizedToF16) {
  Tensor* q = New(Type::kQ8_0, {32});
  Tensor* h = New(Type::kF16, {32});
  absl::StatusOr<Tensor*> c = Cpy(ctx_, q, h);
  Tensor* node = nullptr;
  if (c.ok()) {
    node = *c;
  } else {  // The builder already refuses; check the kernel on its own.
    node = ctx_.NewTensorLike(*h);
    node->op = Op::kCpy;
    node->src[0] = q;
    node->src[1] = h;
    node->view_src = h;
  }
  absl::Status s = Compute(node);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// ---------------------------------------------------------------------------
// Elementwise.

TEST_F(ReferenceTest, BinaryOpsBroadcastRowsAndScalars) {
  // a = [[1, 2, 3], [4, 5, 6]], b = [10, 20, 30] repeated over rows.
  Tensor* a = New(Type::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor* b = New(Type::kF32, {3, 1}, {10, 20, 30});
  EXPECT_EQ(Run(Must(Add(ctx_, a, b))),
            (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(Run(Must(Sub(ctx_, a, b))),
            (std::vector<float>{-9, -18, -27, -6, -15, -24}));
  EXPECT_EQ(Run(Must(Mul(ctx_, a, b))),
            (std::vector<float>{10, 40, 90, 40, 100, 180}));
  Tensor* s = New(Type::kF32, {1, 1}, {2});
  EXPECT_EQ(Run(Must(Div(ctx_, a, s))),
            (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, 3}));
  // Column broadcast: b = [100, 200] along dim 1.
  Tensor* c = New(Type::kF32, {1, 2}, {100, 200});
  EXPECT_EQ(Run(Must(Add(ctx_, a, c))),
            (std::vector<float>{101, 102, 103, 204, 205, 206}));
}

TEST_F(ReferenceTest, AddF16WithF32KeepsF16) {
  Tensor* a = New(Type::kF16, {2}, {1.5f, 2.0f});
  Tensor* b = New(Type::kF32, {2}, {0.25f, -4.0f});
  Tensor* c = Must(Add(ctx_, a, b));
  EXPECT_EQ(c->type, Type::kF16);
  EXPECT_EQ(Run(c), (std::vector<float>{1.75f, -2.0f}));
}

TEST_F(ReferenceTest, ScaleSqrSqrtLog) {
  Tensor* a = New(Type::kF32, {3}, {1, 4, 9});
  EXPECT_EQ(Run(Must(Scale(ctx_, a, 2.0f, 0.5f))),
            (std::vector<float>{2.5f, 8.5f, 18.5f}));
  EXPECT_EQ(Run(Must(Sqr(ctx_, a))), (std::vector<float>{1, 16, 81}));
  EXPECT_EQ(Run(Must(Sqrt(ctx_, a))), (std::vector<float>{1, 2, 3}));
  ExpectNear(Run(Must(Log(ctx_, a))), {0.0f, 1.3862944f, 2.1972246f}, 1e-6f);
}

TEST_F(ReferenceTest, UnaryOpsMatchTheirFormulas) {
  Tensor* a = New(Type::kF32, {3}, {-1.0f, 0.0f, 1.0f});
  EXPECT_EQ(Run(Must(Unary(ctx_, a, UnaryOp::kNeg))),
            (std::vector<float>{1, 0, -1}));
  EXPECT_EQ(Run(Must(Unary(ctx_, a, UnaryOp::kRelu))),
            (std::vector<float>{0, 0, 1}));
  // GELU(1) = 0.5 (1 + tanh(0.7978846 * 1.044715)) = 0.8411920.
  ExpectNear(Run(Must(Unary(ctx_, a, UnaryOp::kGelu))),
             {-0.1588080f, 0.0f, 0.8411920f}, 1e-6f);
  // SiLU(x) = x / (1 + e^-x): SiLU(1) = 0.7310586.
  ExpectNear(Run(Must(Unary(ctx_, a, UnaryOp::kSilu))),
             {-0.2689414f, 0.0f, 0.7310586f}, 1e-6f);
  ExpectNear(Run(Must(Unary(ctx_, a, UnaryOp::kSigmoid))),
             {0.2689414f, 0.5f, 0.7310586f}, 1e-6f);
  ExpectNear(Run(Must(Unary(ctx_, a, UnaryOp::kTanh))),
             {-0.7615942f, 0.0f, 0.7615942f}, 1e-6f);
  ExpectNear(Run(Must(Unary(ctx_, a, UnaryOp::kExp))),
             {0.3678794f, 1.0f, 2.7182818f}, 1e-6f);
}

TEST_F(ReferenceTest, GluWithGateAndSplitHalves) {
  Tensor* x = New(Type::kF32, {2}, {1.0f, -1.0f});
  Tensor* g = New(Type::kF32, {2}, {2.0f, 3.0f});
  // SwiGLU: silu(x) * g.
  ExpectNear(Run(Must(Glu(ctx_, x, g, GluOp::kSwiGlu))),
             {0.7310586f * 2, -0.2689414f * 3}, 1e-6f);
  // GeGLU on halves of [x | g]: gelu(x) * g; swapped: gelu(g) * x.
  Tensor* xg = New(Type::kF32, {4, 1}, {1.0f, -1.0f, 2.0f, 3.0f});
  ExpectNear(Run(Must(GluSplit(ctx_, xg, GluOp::kGeGlu))),
             {0.8411920f * 2, -0.1588080f * 3}, 1e-6f);
  // GELU(2) = 1.9545977, GELU(3) = 2.9963627.
  ExpectNear(Run(Must(GluSplit(ctx_, xg, GluOp::kGeGlu, /*swapped=*/true))),
             {1.9545977f * 1, 2.9963627f * -1}, 1e-5f);
}

// ---------------------------------------------------------------------------
// Row reductions and normalization.

TEST_F(ReferenceTest, SumRowsMeanArgmax) {
  Tensor* a = New(Type::kF32, {3, 2}, {1, 5, 5, -1, -3, -2});
  EXPECT_EQ(Run(Must(SumRows(ctx_, a))), (std::vector<float>{11, -6}));
  EXPECT_EQ(Run(Must(Mean(ctx_, a))), (std::vector<float>{11.0f / 3, -2}));
  // Ties go to the last maximum, as in ggml's CPU backend.
  EXPECT_EQ(Run(Must(Argmax(ctx_, a))), (std::vector<float>{2, 0}));
}

TEST_F(ReferenceTest, NormAndRmsNorm) {
  Tensor* a = New(Type::kF32, {4}, {1, 2, 3, 4});
  const float eps = 1e-5f;
  // mean 2.5, variance 1.25.
  const float inv = 1.0f / std::sqrt(1.25f + eps);
  ExpectNear(Run(Must(Norm(ctx_, a, eps))),
             {-1.5f * inv, -0.5f * inv, 0.5f * inv, 1.5f * inv}, 1e-6f);
  // mean of squares 7.5.
  const float rms = 1.0f / std::sqrt(7.5f + eps);
  ExpectNear(Run(Must(RmsNorm(ctx_, a, eps))),
             {1 * rms, 2 * rms, 3 * rms, 4 * rms}, 1e-6f);
}

TEST_F(ReferenceTest, ArgsortIsStableWithTies) {
  Tensor* a = New(Type::kF32, {5, 1}, {3, 1, 2, 1, 3});
  EXPECT_EQ(Run(Must(Argsort(ctx_, a, SortOrder::kAscending))),
            (std::vector<float>{1, 3, 2, 0, 4}));
  EXPECT_EQ(Run(Must(Argsort(ctx_, a, SortOrder::kDescending))),
            (std::vector<float>{0, 4, 2, 1, 3}));

  // Many ties: values i % 3 sort to the indices of the 0s, 1s, then 2s,
  // each group in index order.
  std::vector<float> x(40);
  for (int i = 0; i < 40; ++i) x[i] = static_cast<float>(i % 3);
  std::vector<float> asc;
  for (int v = 0; v < 3; ++v) {
    for (int i = v; i < 40; i += 3) asc.push_back(static_cast<float>(i));
  }
  std::vector<float> desc;
  for (int v = 2; v >= 0; --v) {
    for (int i = v; i < 40; i += 3) desc.push_back(static_cast<float>(i));
  }
  Tensor* many = New(Type::kF32, {40}, x);
  EXPECT_EQ(Run(Must(Argsort(ctx_, many, SortOrder::kAscending))), asc);
  EXPECT_EQ(Run(Must(Argsort(ctx_, many, SortOrder::kDescending))), desc);
}

// ---------------------------------------------------------------------------
// Matrices and rows.

TEST_F(ReferenceTest, MulMatDotsRows) {
  // a rows [1, 2, 3], [4, 5, 6]; b rows [1, 0, 1], [0, 1, 0].
  Tensor* a = New(Type::kF32, {3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor* b = New(Type::kF32, {3, 2}, {1, 0, 1, 0, 1, 0});
  Tensor* c = Must(MulMat(ctx_, a, b));
  ASSERT_EQ(c->ne[0], 2);
  ASSERT_EQ(c->ne[1], 2);
  EXPECT_EQ(Run(c), (std::vector<float>{4, 10, 2, 5}));
}

TEST_F(ReferenceTest, MulMatBroadcastsAOverBatches) {
  // a: 2 matrices [2, 1] (k = 2, m = 1); b: 4 matrices, b2 = 2 per a.
  Tensor* a = New(Type::kF32, {2, 1, 2, 1}, {1, 1, 1, -1});
  Tensor* b = New(Type::kF32, {2, 1, 4, 1}, {1, 2, 3, 4, 5, 6, 7, 8});
  // b matrices 0, 1 use a[0] (sum), 2, 3 use a[1] (difference).
  EXPECT_EQ(Run(Must(MulMat(ctx_, a, b))), (std::vector<float>{3, 7, -1, -1}));
}

TEST_F(ReferenceTest, MulMatQuantizedAMatchesDequantizedA) {
  std::vector<float> av = Iota(64 * 3, -2.0f, 0.021f);
  Tensor* aq = New(Type::kQ8_0, {64, 3}, av);
  Tensor* af = New(Type::kF32, {64, 3}, Values(aq));  // dequantized
  Tensor* b = New(Type::kF32, {64, 2}, Iota(128, 1.0f, -0.013f));
  ExpectNear(Run(Must(MulMat(ctx_, aq, b))), Run(Must(MulMat(ctx_, af, b))),
             1e-4f);
}

TEST_F(ReferenceTest, GetRowsGathersAndConverts) {
  Tensor* a = New(Type::kF16, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor* idx = New(Type::kI32, {3}, {2, 0, 2});
  Tensor* r = Must(GetRows(ctx_, a, idx));
  EXPECT_EQ(r->type, Type::kF32);
  EXPECT_EQ(Run(r), (std::vector<float>{5, 6, 1, 2, 5, 6}));

  Tensor* q = New(Type::kQ4_0, {32, 2}, Iota(64, -1.0f, 0.05f));
  Tensor* one = New(Type::kI32, {1}, {1});
  std::vector<float> want = Values(q);
  want.erase(want.begin(), want.begin() + 32);
  EXPECT_EQ(Run(Must(GetRows(ctx_, q, one))), want);
}

TEST_F(ReferenceTest, GetRowsRejectsOutOfRangeIndex) {
  Tensor* a = New(Type::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor* idx = New(Type::kI32, {2}, {0, 7});
  absl::Status s = Compute(Must(GetRows(ctx_, a, idx)));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("7"));
  Tensor* neg = New(Type::kI32, {1}, {-1});
  EXPECT_EQ(Compute(Must(GetRows(ctx_, a, neg))).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ReferenceTest, SetRowsWritesRowsConverting) {
  Tensor* dst = New(Type::kF16, {2, 4});
  Tensor* rows = New(Type::kF32, {2, 2}, {1, 2, 3, 4});
  Tensor* idx = New(Type::kI32, {2}, {3, 1});
  ASSERT_TRUE(Compute(Must(SetRows(ctx_, dst, rows, idx))).ok());
  EXPECT_EQ(Values(dst), (std::vector<float>{0, 0, 3, 4, 0, 0, 1, 2}));

  Tensor* q = New(Type::kQ8_0, {32, 2});
  std::vector<float> x = Iota(32, -16.0f, 1.0f);
  Tensor* qrow = New(Type::kF32, {32, 1}, x);
  Tensor* one = New(Type::kI32, {1}, {1});
  ASSERT_TRUE(Compute(Must(SetRows(ctx_, q, qrow, one))).ok());
  BlockQ8_0 expect[1];
  QuantizeRowQ8_0(x.data(), expect, 32);
  EXPECT_EQ(std::memcmp(static_cast<char*>(q->data) + q->nb[1], expect, 34), 0);

  Tensor* bad = New(Type::kI32, {2}, {0, 4});
  absl::Status s = Compute(Must(SetRows(ctx_, dst, rows, bad)));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("4"));
}

TEST_F(ReferenceTest, ConcatAlongEachDim) {
  Tensor* a = New(Type::kF32, {2, 2}, {1, 2, 3, 4});
  Tensor* b = New(Type::kF32, {2, 2}, {5, 6, 7, 8});
  EXPECT_EQ(Run(Must(Concat(ctx_, a, b, 0))),
            (std::vector<float>{1, 2, 5, 6, 3, 4, 7, 8}));
  EXPECT_EQ(Run(Must(Concat(ctx_, a, b, 1))),
            (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  Tensor* i = New(Type::kI32, {1, 2}, {9, 10});
  Tensor* j = New(Type::kI32, {1, 2}, {11, 12});
  EXPECT_EQ(Run(Must(Concat(ctx_, i, j, 0))),
            (std::vector<float>{9, 11, 10, 12}));
}

// ---------------------------------------------------------------------------
// Attention.

TEST_F(ReferenceTest, SoftMaxOfOneTwoThree) {
  Tensor* a = New(Type::kF32, {3}, {1, 2, 3});
  ExpectNear(Run(Must(SoftMax(ctx_, a, nullptr, 1.0f, 0.0f))),
             {0.09003057f, 0.24472847f, 0.66524096f}, 1e-7f);
}

TEST_F(ReferenceTest, SoftMaxScalesAndMasks) {
  // Row 0 masks its last value; row 1 adds -ln 2 to its first.
  Tensor* a = New(Type::kF32, {3, 2}, {2, 4, 6, 0, 0, 0});
  Tensor* mask = New(Type::kF16, {3, 2}, {0, 0, -kInf, -0.69314718f, 0, 0});
  // scale 0.5: row 0 -> softmax([1, 2]) = [0.2689414, 0.7310586, 0];
  // row 1 -> weights [1/2, 1, 1] / 2.5.
  std::vector<float> want = {0.26894142f, 0.73105858f, 0, 0.2f, 0.4f, 0.4f};
  ExpectNear(Run(Must(SoftMax(ctx_, a, mask, 0.5f, 0.0f))), want, 2e-4f);
}

TEST_F(ReferenceTest, SoftMaxAlibiSlopesPerHead) {
  // Two heads, max_bias 8: h = 2, m0 = 2^-4; slopes 1/16 (head 0) and
  // 1/256 (head 1), applied to the mask [0, 16].
  Tensor* a = New(Type::kF32, {2, 1, 2}, {0, 0, 0, 0});
  Tensor* mask = New(Type::kF32, {2, 1}, {0, 16});
  auto pair = [](float z) {  // softmax([0, z])
    const float e = std::exp(z);
    return std::vector<float>{1 / (1 + e), e / (1 + e)};
  };
  std::vector<float> want = pair(1.0f);
  std::vector<float> h1 = pair(16.0f / 256.0f);
  want.insert(want.end(), h1.begin(), h1.end());
  ExpectNear(Run(Must(SoftMax(ctx_, a, mask, 1.0f, 8.0f))), want, 1e-6f);
}

TEST_F(ReferenceTest, RopeNormalAndNeoxRotateKnownAngles) {
  // head_dim 6, n_dims 4, base 10000, pos 2: angles 2 and 2 * 10000^-0.5.
  const float t0 = 2.0f;
  const float t1 = 0.02f;
  Tensor* pos = New(Type::kI32, {1}, {2});
  RopeParams p;
  p.n_dims = 4;
  Tensor* a = New(Type::kF32, {6, 1, 1}, {1, 0, 1, 0, 7, 8});
  ExpectNear(Run(Must(Rope(ctx_, a, pos, p))),
             {std::cos(t0), std::sin(t0), std::cos(t1), std::sin(t1), 7, 8},
             1e-6f);

  p.mode = kRopeNeox;  // pairs (0, 2) and (1, 3)
  Tensor* b = New(Type::kF32, {6, 1, 1}, {1, 1, 0, 0, 7, 8});
  ExpectNear(Run(Must(Rope(ctx_, b, pos, p))),
             {std::cos(t0), std::cos(t1), std::sin(t0), std::sin(t1), 7, 8},
             1e-6f);
}

TEST_F(ReferenceTest, RopeDividesAnglesByFreqFactors) {
  // As RopeNormalAndNeoxRotateKnownAngles, with factors 4 and 0.5: angles
  // 2 / 4 and 0.02 / 0.5.
  const float t0 = 0.5f;
  const float t1 = 0.04f;
  Tensor* pos = New(Type::kI32, {1}, {2});
  Tensor* factors = New(Type::kF32, {2}, {4.0f, 0.5f});
  RopeParams p;
  p.n_dims = 4;
  Tensor* a = New(Type::kF32, {6, 1, 1}, {1, 0, 1, 0, 7, 8});
  ExpectNear(Run(Must(Rope(ctx_, a, pos, p, factors))),
             {std::cos(t0), std::sin(t0), std::cos(t1), std::sin(t1), 7, 8},
             1e-6f);
}

TEST_F(ReferenceTest, RopeUsesEachTokensPosition) {
  Tensor* pos = New(Type::kI32, {2}, {0, 1});
  RopeParams p;
  p.n_dims = 2;
  Tensor* a = New(Type::kF32, {2, 1, 2}, {3, 4, 3, 4});
  // Token 0 is not rotated; token 1 rotates (3, 4) by 1 radian.
  ExpectNear(Run(Must(Rope(ctx_, a, pos, p))),
             {3, 4, 3 * std::cos(1.0f) - 4 * std::sin(1.0f),
              3 * std::sin(1.0f) + 4 * std::cos(1.0f)},
             1e-6f);
}

TEST_F(ReferenceTest, RopeYarnMixesInterpolationAndExtrapolation) {
  // n_dims 4, n_ctx_orig 64, base 10000, beta_fast 32, beta_slow 1:
  // corr dims: 4 ln(64 / (2 pi 32)) / (2 ln 10000) = -0.249 -> floor -1 ->
  // low 0; 4 ln(64 / (2 pi)) / (2 ln 10000) = 0.504 -> ceil 1 -> high 1.
  // ramp(pair 0) = 1 (pure extrapolation), ramp(pair 1) = 0 (interpolation).
  // ext_factor 1, freq_scale 0.5, attn_factor 1: mscale = 1 + 0.1 ln 2.
  RopeParams p;
  p.n_dims = 4;
  p.n_ctx_orig = 64;
  p.freq_scale = 0.5f;
  p.ext_factor = 1.0f;
  Tensor* pos = New(Type::kI32, {1}, {3});
  Tensor* a = New(Type::kF32, {4, 1, 1}, {1, 0, 1, 0});
  const double m = 1.0 + 0.1 * std::log(2.0);
  const double t0 = 3.0;               // theta_extrap of pair 0
  const double t1 = 0.5 * 3.0 * 0.01;  // freq_scale * theta_extrap of pair 1
  ExpectNear(Run(Must(Rope(ctx_, a, pos, p))),
             {static_cast<float>(m * std::cos(t0)),
              static_cast<float>(m * std::sin(t0)),
              static_cast<float>(m * std::cos(t1)),
              static_cast<float>(m * std::sin(t1))},
             1e-6f);
}

// Explicit attention: out[:, h, i] = softmax_j(s_ij) v_j with s_ij =
// softcap(scale q_i.k_j) + slope_h mask[j, i] (k and v of head h / group).
std::vector<float> NaiveAttention(const std::vector<float>& q,
                                  const std::vector<float>& k,
                                  const std::vector<float>& v,
                                  const std::vector<float>& mask, int d,
                                  int d_v, int n_q, int n_kv, int h, int h_kv,
                                  float scale, float softcap,
                                  const std::vector<float>& slopes) {
  std::vector<float> out(d_v * h * n_q);
  for (int head = 0; head < h; ++head) {
    const int kh = head / (h / h_kv);
    for (int i = 0; i < n_q; ++i) {
      std::vector<double> s(n_kv);
      double max = -INFINITY;
      for (int j = 0; j < n_kv; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c) {
          dot += q[(head * n_q + i) * d + c] * k[(kh * n_kv + j) * d + c];
        }
        dot *= scale;
        if (softcap > 0) dot = softcap * std::tanh(dot / softcap);
        s[j] = dot + (mask.empty() ? 0.0 : slopes[head] * mask[i * n_kv + j]);
        max = std::max(max, s[j]);
      }
      double sum = 0;
      for (int j = 0; j < n_kv; ++j) sum += std::exp(s[j] - max);
      for (int c = 0; c < d_v; ++c) {
        double acc = 0;
        for (int j = 0; j < n_kv; ++j) {
          acc += std::exp(s[j] - max) / sum * v[(kh * n_kv + j) * d_v + c];
        }
        out[(i * h + head) * d_v + c] = static_cast<float>(acc);
      }
    }
  }
  return out;
}

TEST_F(ReferenceTest, FlashAttnMatchesExplicitSoftmaxQKV) {
  constexpr int d = 4, d_v = 3, n_q = 3, n_kv = 5, h = 2, h_kv = 1;
  std::vector<float> qv = Iota(d * n_q * h, -1.0f, 0.125f);
  std::vector<float> kv = Iota(d * n_kv * h_kv, 0.5f, -0.0625f);
  std::vector<float> vv = Iota(d_v * n_kv * h_kv, -2.0f, 0.25f);
  std::vector<float> mv(n_kv * n_q, 0.0f);
  mv[0 * n_kv + 4] = -kInf;  // query 0 does not see key 4
  mv[1 * n_kv + 0] = -1.0f;
  Tensor* q = New(Type::kF32, {d, n_q, h, 1}, qv);
  Tensor* k = New(Type::kF16, {d, n_kv, h_kv, 1}, kv);
  Tensor* v = New(Type::kF16, {d_v, n_kv, h_kv, 1}, vv);
  Tensor* mask = New(Type::kF16, {n_kv, n_q}, mv);
  Tensor* out = Must(FlashAttnExt(ctx_, q, k, v, mask, 0.5f, 0.0f, 0.0f));
  ASSERT_EQ(out->ne[0], d_v);
  ASSERT_EQ(out->ne[1], h);
  ASSERT_EQ(out->ne[2], n_q);
  ExpectNear(Run(out),
             NaiveAttention(qv, kv, vv, mv, d, d_v, n_q, n_kv, h, h_kv, 0.5f,
                            0.0f, {1.0f, 1.0f}),
             1e-5f);
}

TEST_F(ReferenceTest, FlashAttnSoftcapAndAlibi) {
  constexpr int d = 2, d_v = 2, n_q = 2, n_kv = 3, h = 4, h_kv = 2;
  std::vector<float> qv = Iota(d * n_q * h, -2.0f, 0.3f);
  std::vector<float> kv = Iota(d * n_kv * h_kv, 1.0f, -0.2f);
  std::vector<float> vv = Iota(d_v * n_kv * h_kv, -1.0f, 0.5f);
  std::vector<float> mv = {0, -1, -2, -1, 0, -3};
  Tensor* q = New(Type::kF32, {d, n_q, h, 1}, qv);
  Tensor* k = New(Type::kF32, {d, n_kv, h_kv, 1}, kv);
  Tensor* v = New(Type::kF32, {d_v, n_kv, h_kv, 1}, vv);
  Tensor* mask = New(Type::kF32, {n_kv, n_q}, mv);
  // max_bias 4 over 4 heads: m0 = 2^-1, slopes 1/2, 1/4, 1/8, 1/16.
  std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  Tensor* out = Must(FlashAttnExt(ctx_, q, k, v, mask, 0.7f, 4.0f, 1.5f));
  ExpectNear(Run(out),
             NaiveAttention(qv, kv, vv, mv, d, d_v, n_q, n_kv, h, h_kv, 0.7f,
                            1.5f, slopes),
             1e-6f);
}

TEST_F(ReferenceTest, FlashAttnFullyMaskedRowIsZero) {
  Tensor* q = New(Type::kF32, {2, 1, 1, 1}, {1, 2});
  Tensor* k = New(Type::kF32, {2, 2, 1, 1}, {1, 0, 0, 1});
  Tensor* v = New(Type::kF32, {2, 2, 1, 1}, {5, 6, 7, 8});
  Tensor* mask = New(Type::kF32, {2, 1}, {-kInf, -kInf});
  EXPECT_EQ(Run(Must(FlashAttnExt(ctx_, q, k, v, mask, 1.0f, 0.0f, 0.0f))),
            (std::vector<float>{0, 0}));
}

// ---------------------------------------------------------------------------
// Layouts, threading, in place, errors.

// Builds one op over a 3-d F32 input `a` (rows of 8) for layout, threading
// and in-place checks.
using OpBuilder = std::function<absl::StatusOr<Tensor*>(Context&, Tensor*)>;

struct NamedOp {
  std::string name;
  OpBuilder build;
};

std::vector<NamedOp> RowOps(Tensor* other, Tensor* pos, Tensor* mask) {
  return {
      {"add", [=](Context& c, Tensor* a) { return Add(c, a, other); }},
      {"mul", [=](Context& c, Tensor* a) { return Mul(c, a, other); }},
      {"scale", [](Context& c, Tensor* a) { return Scale(c, a, 3.0f, 1.0f); }},
      {"gelu",
       [](Context& c, Tensor* a) { return Unary(c, a, UnaryOp::kGelu); }},
      {"norm", [](Context& c, Tensor* a) { return Norm(c, a, 1e-5f); }},
      {"rms_norm", [](Context& c, Tensor* a) { return RmsNorm(c, a, 1e-5f); }},
      {"soft_max",
       [=](Context& c, Tensor* a) { return SoftMax(c, a, mask, 0.5f, 2.0f); }},
      {"rope_neox",
       [=](Context& c, Tensor* a) {
         RopeParams p;
         p.n_dims = 6;
         p.mode = kRopeNeox;
         p.ext_factor = 0.5f;
         p.n_ctx_orig = 128;
         p.freq_scale = 0.25f;
         return Rope(c, a, pos, p);
       }},
      {"sum_rows", [](Context& c, Tensor* a) { return SumRows(c, a); }},
      {"argsort",
       [](Context& c, Tensor* a) {
         return Argsort(c, a, SortOrder::kDescending);
       }},
      {"swiglu",
       [](Context& c, Tensor* a) { return GluSplit(c, a, GluOp::kSwiGlu); }},
  };
}

class ReferenceLayoutTest : public ReferenceTest {
 protected:
  void SetUp() override {
    other_ = New(Type::kF32, {8, 1, 3}, Iota(24, -1.0f, 0.1f));
    pos_ = New(Type::kI32, {3}, {5, 0, 17});
    mask_ = New(Type::kF16, {8, 4}, Iota(32, -3.0f, 0.2f));
  }
  std::vector<NamedOp> Ops() { return RowOps(other_, pos_, mask_); }

  Tensor* other_;
  Tensor* pos_;
  Tensor* mask_;
};

TEST_F(ReferenceLayoutTest, PermutedInputEqualsContiguousInput) {
  for (const NamedOp& op : Ops()) {
    SCOPED_TRACE(op.name);
    // base [4, 8, 3] permuted to a [8, 4, 3] view with strided rows.
    Tensor* base = New(Type::kF32, {4, 8, 3}, Iota(96, -2.0f, 0.043f));
    Tensor* view = Must(Permute(ctx_, base, 1, 0, 2, 3));
    ASSERT_FALSE(view->IsContiguous());
    Tensor* cont = Must(Cont(ctx_, view));
    ASSERT_TRUE(Compute(cont).ok());
    Tensor* on_cont = Must(op.build(ctx_, cont));
    ASSERT_NE(on_cont, nullptr);
    // Builders may insist on contiguous inputs where ggml does; the kernel
    // must still read strided ones, so feed it the view directly then.
    absl::StatusOr<Tensor*> built = op.build(ctx_, view);
    Tensor* on_view = built.ok() ? *built : ctx_.NewTensorLike(*on_cont);
    on_view->src[0] = view;
    EXPECT_EQ(Run(on_view), Run(on_cont));
  }
}

TEST_F(ReferenceLayoutTest, ThreeThreadsEqualOne) {
  for (const NamedOp& op : Ops()) {
    SCOPED_TRACE(op.name);
    Tensor* a = New(Type::kF32, {8, 4, 3}, Iota(96, -2.0f, 0.043f));
    Tensor* one = Must(op.build(ctx_, a));
    Tensor* three = Must(op.build(ctx_, a));
    ASSERT_NE(one, nullptr);
    EXPECT_EQ(Run(one, 1), Run(three, 3));
  }
}

TEST_F(ReferenceLayoutTest, InPlaceEqualsOutOfPlace) {
  for (const NamedOp& op : Ops()) {
    if (op.name == "sum_rows" || op.name == "argsort" || op.name == "swiglu") {
      continue;  // not in-place ops
    }
    SCOPED_TRACE(op.name);
    std::vector<float> x = Iota(96, -2.0f, 0.043f);
    Tensor* a = New(Type::kF32, {8, 4, 3}, x);
    Tensor* b = New(Type::kF32, {8, 4, 3}, x);
    Tensor* out_of_place = Must(op.build(ctx_, a));
    Tensor* in_place = Must(op.build(ctx_, b));
    ASSERT_NE(in_place, nullptr);
    in_place->data = b->data;
    EXPECT_EQ(Run(in_place, 2), Run(out_of_place));
  }
}

TEST_F(ReferenceTest, ThreadedMulMatFlashAttnGetRowsEqualOne) {
  Tensor* a = New(Type::kQ4_0, {32, 5, 2}, Iota(320, -1.0f, 0.007f));
  Tensor* b = New(Type::kF32, {32, 3, 4}, Iota(384, 0.5f, -0.003f));
  Tensor* idx = New(Type::kI32, {4, 2}, {4, 0, 1, 4, 2, 2, 3, 0});
  std::vector<std::function<absl::StatusOr<Tensor*>()>> builds = {
      [&] { return MulMat(ctx_, a, b); },
      [&] { return GetRows(ctx_, a, idx); },
      [&] {
        Tensor* q = New(Type::kF32, {32, 3, 4}, Iota(384, -0.5f, 0.004f));
        Tensor* k = New(Type::kF16, {32, 5, 2}, Iota(320, 0.3f, -0.002f));
        return FlashAttnExt(ctx_, q, k, k, nullptr, 0.2f, 0.0f, 0.0f);
      },
  };
  for (auto& build : builds) {
    Tensor* one = Must(build());
    Tensor* four = Must(build());
    ASSERT_NE(one, nullptr);
    EXPECT_EQ(Run(one, 1), Run(four, 4));
  }
}

TEST_F(ReferenceTest, MulMatWithPermutedBEqualsContiguousB) {
  Tensor* a = New(Type::kF16, {4, 3}, Iota(12, -1.0f, 0.25f));
  Tensor* bt = New(Type::kF32, {2, 4}, Iota(8, 1.0f, 0.5f));
  Tensor* b = Must(Transpose(ctx_, bt));  // [4, 2], strided
  Tensor* bc = Must(Cont(ctx_, b));
  ASSERT_TRUE(Compute(bc).ok());
  absl::StatusOr<Tensor*> strided = MulMat(ctx_, a, b);
  if (!strided.ok()) GTEST_SKIP() << "builder wants contiguous b";
  EXPECT_EQ(Run(*strided), Run(Must(MulMat(ctx_, a, bc))));
}

TEST_F(ReferenceTest, RejectsWrongTypeCombinations) {
  Tensor* a = New(Type::kF32, {4, 2}, Iota(8, 0, 1));
  Tensor* b = New(Type::kF32, {4, 2}, Iota(8, 0, 1));
  Tensor* mm = Must(MulMat(ctx_, a, b));
  Tensor* h = New(Type::kF16, {4, 2});
  mm->src[1] = h;  // MUL_MAT wants an F32 b
  EXPECT_EQ(Compute(mm).code(), absl::StatusCode::kInvalidArgument);

  Tensor* sm = Must(SumRows(ctx_, a));
  sm->src[0] = h;  // SUM_ROWS wants F32
  EXPECT_EQ(Compute(sm).code(), absl::StatusCode::kInvalidArgument);

  Tensor* add = Must(Add(ctx_, a, b));
  add->src[1] = New(Type::kF32, {3, 2});  // does not broadcast
  EXPECT_EQ(Compute(add).code(), absl::StatusCode::kInvalidArgument);

  Tensor* u = Must(Unary(ctx_, a, UnaryOp::kExp));
  u->op_params[0] = 99;
  EXPECT_EQ(Compute(u).code(), absl::StatusCode::kInvalidArgument);

  Tensor* missing = Must(Add(ctx_, a, b));
  missing->src[1] = nullptr;
  EXPECT_EQ(Compute(missing).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(ReferenceCompute(*a, 3, 3).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ReferenceTest, EmptyTensorsAndViewOpsDoNothing) {
  Tensor* a = New(Type::kF32, {0, 3});
  Tensor* b = New(Type::kF32, {0, 3});
  EXPECT_TRUE(Compute(Must(Add(ctx_, a, b))).ok());
  EXPECT_TRUE(Compute(Must(SoftMax(ctx_, a, nullptr, 1.0f, 0.0f))).ok());

  Tensor* c = New(Type::kF32, {2, 2}, {1, 2, 3, 4});
  Tensor* t = Must(Transpose(ctx_, c));
  ASSERT_TRUE(Compute(t).ok());
  EXPECT_EQ(Values(c), (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace tessera
