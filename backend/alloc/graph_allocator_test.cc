#include "backend/alloc/graph_allocator.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backend/buffer.h"
#include "backend/cpu/cpu_device.h"
#include "graph/context.h"
#include "backend/alloc/free_list.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/reference.h"
#include "base/status_macros.h"
#include "backend/alloc/tensor_allocator.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr size_t kAlign = 64;  // CpuBufferType's alignment

uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// ---------------------------------------------------------------------------
// An oracle for "no two tensors share memory while both are needed",
// computed from the graph alone (not from the allocator's bookkeeping).
//
// Every tensor with memory of its own (not a view) is written at `def`: the
// index of its node, -1 for inputs (written before compute), or for other
// leafs (scratch such as a cache that a CPY fills) the first node that reads
// them. It is needed until `last`: the last node that reads it or a view of
// it, or forever for outputs, inputs and nodes that nothing reads (results,
// views among them). Two such tensors whose bytes overlap conflict when the
// later one is written while the earlier is still needed, except for an op that
// runs in place: the node that writes B reads A (same address) only as
// src[0], and that is A's last use.

const Tensor* Root(const Tensor* t) {
  while (t->view_src != nullptr) t = t->view_src;
  return t;
}

std::string FindLiveOverlap(const Graph& graph) {
  constexpr int kForever = INT_MAX;
  absl::flat_hash_map<const Tensor*, int> def;
  absl::flat_hash_map<const Tensor*, int> last;
  std::vector<const Tensor*> owners;
  auto add_owner = [&](const Tensor* t, int at) {
    if (t->IsView() || def.contains(t)) return;
    def[t] = at;
    last[t] = at;
    owners.push_back(t);
  };
  auto use = [&](const Tensor* t, int at) {
    const Tensor* root = Root(t);
    if (last.contains(root)) last[root] = std::max(last[root], at);
  };
  absl::Span<Tensor* const> nodes = graph.nodes();
  absl::flat_hash_set<const Tensor*> read;
  absl::flat_hash_map<const Tensor*, int> first_read;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Tensor* src : nodes[i]->src) {
      if (src == nullptr) continue;
      read.insert(src);
      first_read.try_emplace(Root(src), static_cast<int>(i));
    }
  }
  auto add_leaf = [&](const Tensor* t) {
    if (t->IsView()) return;
    const auto it = first_read.find(t);
    add_owner(
        t, t->HasFlag(kFlagInput) || it == first_read.end() ? -1 : it->second);
  };
  for (const Tensor* leaf : graph.leafs()) add_leaf(leaf);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Tensor* src : nodes[i]->src) {
      if (src != nullptr) add_leaf(Root(src));
    }
    add_owner(nodes[i], static_cast<int>(i));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Tensor* src : nodes[i]->src) {
      if (src != nullptr) use(src, static_cast<int>(i));
    }
    if (nodes[i]->IsView()) use(nodes[i], static_cast<int>(i));
  }
  for (const Tensor* t : graph.nodes()) {
    if (!read.contains(t) || t->HasFlag(kFlagOutput)) use(t, kForever);
  }
  for (const Tensor* t : owners) {
    if (t->HasFlag(kFlagOutput) || t->HasFlag(kFlagInput)) use(t, kForever);
  }

  auto in_place = [&](const Tensor* a, const Tensor* b) {
    if (def[b] != last[a] || def[b] < 0 || a->data != b->data) return false;
    const Tensor* node = nodes[def[b]];
    if (node != b || node->src[0] != a) return false;
    for (int s = 1; s < kMaxSrc; ++s) {
      if (node->src[s] != nullptr && Root(node->src[s]) == a) return false;
    }
    return true;
  };
  for (size_t i = 0; i < owners.size(); ++i) {
    for (size_t j = i + 1; j < owners.size(); ++j) {
      const Tensor* a = owners[i];
      const Tensor* b = owners[j];
      if (a->data == nullptr || b->data == nullptr) continue;
      const uintptr_t a0 = Address(a->data), b0 = Address(b->data);
      if (!(a0 < b0 + b->NumBytes() && b0 < a0 + a->NumBytes())) continue;
      if (def[a] > def[b]) std::swap(a, b);
      if (def[b] > last[a] || in_place(a, b)) continue;
      return absl::StrCat(Describe(*a), " (written at ", def[a],
                          ", needed until ", last[a], ") overlaps ",
                          Describe(*b), " (written at ", def[b], ")");
    }
  }
  return "";
}

// Every tensor of `graph` has data; views point at their root plus offset;
// tensors with memory of their own lie in `buffer` at the alignment unless
// they are in `elsewhere`.
void ExpectPlaced(const Graph& graph, const Buffer* buffer,
                  const absl::flat_hash_set<const Tensor*>& elsewhere = {}) {
  std::vector<const Tensor*> all(graph.leafs().begin(), graph.leafs().end());
  all.insert(all.end(), graph.nodes().begin(), graph.nodes().end());
  for (const Tensor* t : all) {
    ASSERT_NE(t->data, nullptr) << Describe(*t);
    if (t->IsView()) {
      EXPECT_EQ(t->data, static_cast<char*>(t->view_src->data) + t->view_offs)
          << Describe(*t);
      EXPECT_EQ(t->buffer, t->view_src->buffer) << Describe(*t);
      continue;
    }
    if (elsewhere.contains(t)) continue;
    ASSERT_NE(buffer, nullptr);
    EXPECT_EQ(t->buffer, buffer) << Describe(*t);
    const char* base =
        static_cast<const char*>(const_cast<Buffer*>(buffer)->base());
    EXPECT_GE(static_cast<const char*>(t->data), base) << Describe(*t);
    EXPECT_LE(static_cast<const char*>(t->data) + t->NumBytes(),
              base + buffer->size())
        << Describe(*t);
    EXPECT_EQ(Address(t->data) % kAlign, 0u) << Describe(*t);
  }
}

// ---------------------------------------------------------------------------
// Graphs.

Tensor* Named(Tensor* t, const std::string& name, uint32_t flags = 0) {
  t->name = name;
  t->flags |= flags;
  return t;
}

// A transformer block (attention with RoPE and a KV-cache copy, SwiGLU
// feed-forward) over `n` tokens.
struct Block {
  static constexpr int64_t kDim = 64;
  static constexpr int64_t kHeads = 4;
  static constexpr int64_t kHeadDim = 16;
  static constexpr int64_t kFf = 128;

  Graph graph;
  Tensor* x = nullptr;    // F32 [kDim, n], input
  Tensor* pos = nullptr;  // I32 [n], input
  std::vector<Tensor*> weights;
  Tensor* mid = nullptr;   // the residual after attention, output
  Tensor* out = nullptr;   // the block's result, output
  Tensor* tail = nullptr;  // a strided view made contiguous, output
};

absl::Status BuildBlock(Context& ctx, int64_t n, Block& b) {
  using B = Block;
  auto weight = [&](std::vector<int64_t> ne,
                    const char* name) -> absl::StatusOr<Tensor*> {
    TESSERA_ASSIGN_OR_RETURN(Tensor * w, ctx.NewTensor(Type::kF32, ne));
    b.weights.push_back(Named(w, name, kFlagParam));
    return w;
  };
  TESSERA_ASSIGN_OR_RETURN(b.x, ctx.NewTensor(Type::kF32, {B::kDim, n}));
  Named(b.x, "x", kFlagInput);
  TESSERA_ASSIGN_OR_RETURN(b.pos, ctx.NewTensor(Type::kI32, {n}));
  Named(b.pos, "pos", kFlagInput);
  TESSERA_ASSIGN_OR_RETURN(Tensor * attn_norm, weight({B::kDim}, "attn_norm"));
  TESSERA_ASSIGN_OR_RETURN(Tensor * wq, weight({B::kDim, B::kDim}, "wq"));
  TESSERA_ASSIGN_OR_RETURN(Tensor * wk, weight({B::kDim, B::kDim}, "wk"));
  TESSERA_ASSIGN_OR_RETURN(Tensor * wv, weight({B::kDim, B::kDim}, "wv"));
  TESSERA_ASSIGN_OR_RETURN(Tensor * wo, weight({B::kDim, B::kDim}, "wo"));
  TESSERA_ASSIGN_OR_RETURN(Tensor * ffn_norm, weight({B::kDim}, "ffn_norm"));
  TESSERA_ASSIGN_OR_RETURN(Tensor * w1, weight({B::kDim, B::kFf}, "w1"));
  TESSERA_ASSIGN_OR_RETURN(Tensor * w3, weight({B::kDim, B::kFf}, "w3"));
  TESSERA_ASSIGN_OR_RETURN(Tensor * w2, weight({B::kFf, B::kDim}, "w2"));
  // Scratch that the graph copies K into: a leaf without data or flags.
  TESSERA_ASSIGN_OR_RETURN(
      Tensor * kcache, ctx.NewTensor(Type::kF32, {B::kHeadDim, B::kHeads, n}));
  Named(kcache, "kcache");

  RopeParams rope;
  rope.n_dims = B::kHeadDim;
  TESSERA_ASSIGN_OR_RETURN(Tensor * h, RmsNorm(ctx, b.x, 1e-5f));
  TESSERA_ASSIGN_OR_RETURN(h, Mul(ctx, h, attn_norm));
  TESSERA_ASSIGN_OR_RETURN(Tensor * q, MulMat(ctx, wq, h));
  TESSERA_ASSIGN_OR_RETURN(q, Reshape(ctx, q, {B::kHeadDim, B::kHeads, n}));
  TESSERA_ASSIGN_OR_RETURN(q, Rope(ctx, q, b.pos, rope));
  TESSERA_ASSIGN_OR_RETURN(q, Permute(ctx, q, 0, 2, 1, 3));
  TESSERA_ASSIGN_OR_RETURN(Tensor * k, MulMat(ctx, wk, h));
  TESSERA_ASSIGN_OR_RETURN(k, Reshape(ctx, k, {B::kHeadDim, B::kHeads, n}));
  TESSERA_ASSIGN_OR_RETURN(k, Rope(ctx, k, b.pos, rope));
  TESSERA_ASSIGN_OR_RETURN(k, Cpy(ctx, k, kcache));
  TESSERA_ASSIGN_OR_RETURN(k, Permute(ctx, k, 0, 2, 1, 3));
  TESSERA_ASSIGN_OR_RETURN(Tensor * v, MulMat(ctx, wv, h));
  TESSERA_ASSIGN_OR_RETURN(v, Reshape(ctx, v, {B::kHeadDim, B::kHeads, n}));
  TESSERA_ASSIGN_OR_RETURN(v, Permute(ctx, v, 1, 2, 0, 3));
  TESSERA_ASSIGN_OR_RETURN(v, Cont(ctx, v));
  TESSERA_ASSIGN_OR_RETURN(Tensor * kq, MulMat(ctx, k, q));
  TESSERA_ASSIGN_OR_RETURN(kq, SoftMax(ctx, kq, nullptr, 0.25f, 0.0f));
  TESSERA_ASSIGN_OR_RETURN(Tensor * kqv, MulMat(ctx, v, kq));
  TESSERA_ASSIGN_OR_RETURN(kqv, Permute(ctx, kqv, 0, 2, 1, 3));
  TESSERA_ASSIGN_OR_RETURN(kqv, Cont(ctx, kqv));
  TESSERA_ASSIGN_OR_RETURN(kqv, Reshape(ctx, kqv, {B::kDim, n}));
  TESSERA_ASSIGN_OR_RETURN(Tensor * attn, MulMat(ctx, wo, kqv));
  TESSERA_ASSIGN_OR_RETURN(b.mid, Add(ctx, attn, b.x));
  Named(b.mid, "mid", kFlagOutput);

  TESSERA_ASSIGN_OR_RETURN(Tensor * h2, RmsNorm(ctx, b.mid, 1e-5f));
  TESSERA_ASSIGN_OR_RETURN(h2, Mul(ctx, h2, ffn_norm));
  TESSERA_ASSIGN_OR_RETURN(Tensor * gate, MulMat(ctx, w1, h2));
  TESSERA_ASSIGN_OR_RETURN(Tensor * up, MulMat(ctx, w3, h2));
  TESSERA_ASSIGN_OR_RETURN(gate, Unary(ctx, gate, UnaryOp::kSilu));
  TESSERA_ASSIGN_OR_RETURN(Tensor * gu, Mul(ctx, gate, up));
  TESSERA_ASSIGN_OR_RETURN(
      Tensor * half,
      View(ctx, gu, {B::kFf / 2, n}, {gu->nb[1]}, B::kFf / 2 * sizeof(float)));
  TESSERA_ASSIGN_OR_RETURN(b.tail, Cont(ctx, half));
  Named(b.tail, "tail", kFlagOutput);
  TESSERA_ASSIGN_OR_RETURN(Tensor * down, MulMat(ctx, w2, gu));
  TESSERA_ASSIGN_OR_RETURN(b.out, Add(ctx, down, b.mid));
  Named(b.out, "out", kFlagOutput);

  TESSERA_RETURN_IF_ERROR(b.graph.Expand(b.tail));
  return b.graph.Expand(b.out);
}

// Deterministic values in [-1, 1) for tensor number `seed`.
void Fill(Tensor& t, uint32_t seed) {
  const int64_t n = t.NumElements();
  if (t.type == Type::kI32) {
    int32_t* p = static_cast<int32_t*>(t.data);
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(i);
    return;
  }
  float* p = static_cast<float*>(t.data);
  uint32_t state = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    p[i] = static_cast<float>(state >> 8) / static_cast<float>(1 << 23) - 1.0f;
  }
}

void FillInputs(Block& b) {
  uint32_t seed = 1;
  Fill(*b.x, seed++);
  Fill(*b.pos, seed++);
  for (Tensor* w : b.weights) Fill(*w, seed++);
}

absl::Status Compute(const Graph& graph) {
  for (Tensor* node : graph.nodes()) {
    TESSERA_RETURN_IF_ERROR(ReferenceCompute(*node));
  }
  return absl::OkStatus();
}

std::vector<float> Values(const Tensor& t) {
  const float* p = static_cast<const float*>(t.data);
  return std::vector<float>(p, p + t.NumElements());
}

// x -> Dup -> ... -> Dup (n times), or any other unary builder.
absl::Status BuildChain(
    Context& ctx, int n, int64_t width,
    const std::function<absl::StatusOr<Tensor*>(Tensor*)>& op, Graph& graph,
    std::vector<Tensor*>* chain = nullptr) {
  TESSERA_ASSIGN_OR_RETURN(Tensor * t, ctx.NewTensor(Type::kF32, {width}));
  Named(t, "x", kFlagInput);
  if (chain != nullptr) chain->push_back(t);
  for (int i = 0; i < n; ++i) {
    TESSERA_ASSIGN_OR_RETURN(t, op(t));
    if (chain != nullptr) chain->push_back(t);
  }
  return graph.Expand(t);
}

class GraphAllocatorTest : public ::testing::Test {
 protected:
  BufferType& type() { return device_.buffer_type(); }

  CpuDevice device_{CpuDeviceOptions{}};
  Context ctx_;
};

// ---------------------------------------------------------------------------

TEST(FreeListTest, RoundsSizesToTheAlignmentAndExtendsTheEnd) {
  FreeList list(64);
  EXPECT_EQ(list.Alloc(10), 0u);
  EXPECT_EQ(list.Alloc(100), 64u);
  EXPECT_EQ(list.Alloc(0), 192u);  // an empty range still takes 64 bytes
  EXPECT_EQ(list.end(), 256u);
  EXPECT_EQ(list.high_water(), 256u);
}

TEST(FreeListTest, BestFitTakesTheSmallestBlockThatFits) {
  FreeList list(64);
  const size_t a = list.Alloc(128);  // [0, 128)
  list.Alloc(64);                    // [128, 192) stays
  const size_t b = list.Alloc(64);   // [192, 256)
  list.Alloc(64);                    // [256, 320) stays
  const size_t c = list.Alloc(256);  // [320, 576)
  list.Alloc(64);                    // [576, 640) stays
  list.Free(a, 128);
  list.Free(b, 64);
  list.Free(c, 256);
  EXPECT_EQ(list.num_free_blocks(), 3u);
  EXPECT_EQ(list.Alloc(60), 192u);
  EXPECT_EQ(list.Alloc(100), 0u);
  EXPECT_EQ(list.Alloc(190), 320u);       // rounds to 192
  EXPECT_EQ(list.num_free_blocks(), 1u);  // [512, 576) remains
  EXPECT_EQ(list.Alloc(300), 640u);
  EXPECT_EQ(list.Alloc(64), 512u);
  EXPECT_EQ(list.high_water(), 960u);
}

TEST(FreeListTest, CoalescesAdjacentFreeBlocks) {
  FreeList list(64);
  const size_t a0 = list.Alloc(64);
  const size_t a1 = list.Alloc(64);
  const size_t a2 = list.Alloc(64);
  list.Alloc(64);  // keeps the blocks below the end
  list.Free(a0, 64);
  list.Free(a2, 64);
  EXPECT_EQ(list.num_free_blocks(), 2u);
  list.Free(a1, 64);
  EXPECT_EQ(list.num_free_blocks(), 1u);
  EXPECT_EQ(list.Alloc(192), 0u);
  EXPECT_EQ(list.high_water(), 256u);
}

TEST(FreeListTest, FreeingAtTheEndShrinksTheUsedSpace) {
  FreeList list(64);
  const size_t a = list.Alloc(64);
  const size_t b = list.Alloc(64);
  const size_t c = list.Alloc(64);
  list.Free(b, 64);
  EXPECT_EQ(list.num_free_blocks(), 1u);
  list.Free(c, 64);  // merges with b's block, which then reaches the end
  EXPECT_EQ(list.num_free_blocks(), 0u);
  EXPECT_EQ(list.end(), 64u);
  list.Free(a, 64);
  EXPECT_EQ(list.end(), 0u);
  // A larger range now starts at 0 instead of past the old end.
  EXPECT_EQ(list.Alloc(256), 0u);
  EXPECT_EQ(list.high_water(), 256u);
}

TEST_F(GraphAllocatorTest, BlockHasNoLiveOverlapAndComputesAsWithoutReuse) {
  Block b;
  ASSERT_TRUE(BuildBlock(ctx_, 8, b).ok());
  absl::StatusOr<std::unique_ptr<Buffer>> weights =
      AllocTensors(type(), b.weights);
  ASSERT_TRUE(weights.ok()) << weights.status();

  GraphAllocator alloc({&type()});
  absl::Status status = alloc.Alloc(b.graph);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(alloc.num_buffers(), 1u);
  EXPECT_EQ(alloc.allocations(), 1);
  ASSERT_NE(alloc.buffer(0), nullptr);
  EXPECT_EQ(alloc.buffer(0)->usage(), BufferUsage::kCompute);
  const absl::flat_hash_set<const Tensor*> placed(b.weights.begin(),
                                                  b.weights.end());
  ExpectPlaced(b.graph, alloc.buffer(0), placed);
  EXPECT_EQ(FindLiveOverlap(b.graph), "");
  for (const Tensor* w : b.weights) EXPECT_EQ(w->buffer, weights->get());

  // Reuse: less memory than every tensor in its own range.
  size_t total = 0;
  for (const Tensor* t : b.graph.nodes()) {
    if (!t->IsView()) total += (t->NumBytes() + kAlign - 1) / kAlign * kAlign;
  }
  EXPECT_LT(alloc.buffer_size(0), total);

  // The same graph with every tensor in memory of its own computes the same.
  FillInputs(b);
  status = Compute(b.graph);
  ASSERT_TRUE(status.ok()) << status;
  Context ref_ctx;
  Block ref;
  ASSERT_TRUE(BuildBlock(ref_ctx, 8, ref).ok());
  std::vector<Tensor*> all(ref.graph.leafs().begin(), ref.graph.leafs().end());
  all.insert(all.end(), ref.graph.nodes().begin(), ref.graph.nodes().end());
  absl::StatusOr<std::unique_ptr<Buffer>> ref_buffer =
      AllocTensors(type(), all);
  ASSERT_TRUE(ref_buffer.ok()) << ref_buffer.status();
  FillInputs(ref);
  status = Compute(ref.graph);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(Values(*b.mid), Values(*ref.mid));
  EXPECT_EQ(Values(*b.tail), Values(*ref.tail));
  EXPECT_EQ(Values(*b.out), Values(*ref.out));
  for (float v : Values(*ref.out)) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(GraphAllocatorTest, ChainOfCopiesReusesTwoTensors) {
  Graph graph;
  std::vector<Tensor*> chain;
  ASSERT_TRUE(
      BuildChain(
          ctx_, 64, 256, [&](Tensor* t) { return Dup(ctx_, t); }, graph, &chain)
          .ok());
  GraphAllocator alloc({&type()});
  ASSERT_TRUE(alloc.Alloc(graph).ok());
  // The input (kept) and two tensors that take turns: 3 KiB, not 65.
  EXPECT_EQ(alloc.buffer_size(0), 3u * 1024u);
  ExpectPlaced(graph, alloc.buffer(0));
  EXPECT_EQ(FindLiveOverlap(graph), "");
  for (size_t i = 1; i < chain.size(); ++i) {
    EXPECT_NE(chain[i]->data, chain[i - 1]->data) << i;
  }
}

TEST_F(GraphAllocatorTest, ChainOfInPlaceOpsSharesOneTensor) {
  Graph graph;
  std::vector<Tensor*> chain;
  ASSERT_TRUE(BuildChain(
                  ctx_, 64, 256,
                  [&](Tensor* t) { return Scale(ctx_, t, 2.0f); }, graph,
                  &chain)
                  .ok());
  GraphAllocator alloc({&type()});
  ASSERT_TRUE(alloc.Alloc(graph).ok());
  EXPECT_EQ(alloc.buffer_size(0), 2u * 1024u);
  EXPECT_NE(chain[1]->data, chain[0]->data);  // the input is never reused
  for (size_t i = 2; i < chain.size(); ++i) {
    EXPECT_EQ(chain[i]->data, chain[1]->data) << i;
  }
  EXPECT_EQ(FindLiveOverlap(graph), "");
}

// x, y (inputs) -> a = Dup(x) -> r = op(a, y, pos); r is the result.
struct OpCase {
  std::string name;
  std::function<absl::StatusOr<Tensor*>(Context&, Tensor*, Tensor*, Tensor*)>
      build;
};

std::vector<OpCase> InPlaceOps() {
  RopeParams rope;
  rope.n_dims = 8;
  return {
      {"add",
       [](Context& c, Tensor* a, Tensor* y, Tensor*) { return Add(c, a, y); }},
      {"sub",
       [](Context& c, Tensor* a, Tensor* y, Tensor*) { return Sub(c, a, y); }},
      {"mul",
       [](Context& c, Tensor* a, Tensor* y, Tensor*) { return Mul(c, a, y); }},
      {"div",
       [](Context& c, Tensor* a, Tensor* y, Tensor*) { return Div(c, a, y); }},
      {"scale", [](Context& c, Tensor* a, Tensor*,
                   Tensor*) { return Scale(c, a, 0.5f, 1.0f); }},
      {"sqr",
       [](Context& c, Tensor* a, Tensor*, Tensor*) { return Sqr(c, a); }},
      {"sqrt",
       [](Context& c, Tensor* a, Tensor*, Tensor*) { return Sqrt(c, a); }},
      {"log",
       [](Context& c, Tensor* a, Tensor*, Tensor*) { return Log(c, a); }},
      {"unary", [](Context& c, Tensor* a, Tensor*,
                   Tensor*) { return Unary(c, a, UnaryOp::kGelu); }},
      {"norm", [](Context& c, Tensor* a, Tensor*,
                  Tensor*) { return Norm(c, a, 1e-5f); }},
      {"rms_norm", [](Context& c, Tensor* a, Tensor*,
                      Tensor*) { return RmsNorm(c, a, 1e-5f); }},
      {"soft_max", [](Context& c, Tensor* a, Tensor*,
                      Tensor*) { return SoftMax(c, a, nullptr, 1.0f, 0.0f); }},
      {"rope", [rope](Context& c, Tensor* a, Tensor*,
                      Tensor* pos) { return Rope(c, a, pos, rope); }},
  };
}

std::vector<OpCase> NotInPlaceOps() {
  return {
      {"dup",
       [](Context& c, Tensor* a, Tensor*, Tensor*) { return Dup(c, a); }},
      {"cont",
       [](Context& c, Tensor* a, Tensor*, Tensor*) { return Cont(c, a); }},
      {"glu", [](Context& c, Tensor* a, Tensor* y,
                 Tensor*) { return Glu(c, a, y, GluOp::kSwiGlu); }},
      {"argsort", [](Context& c, Tensor* a, Tensor*,
                     Tensor*) { return Argsort(c, a, SortOrder::kAscending); }},
  };
}

// Builds the OpCase graph; returns {a, r}.
absl::StatusOr<std::pair<Tensor*, Tensor*>> BuildOpCase(Context& ctx,
                                                        const OpCase& op,
                                                        Graph& graph) {
  TESSERA_ASSIGN_OR_RETURN(Tensor * x, ctx.NewTensor(Type::kF32, {8, 2, 4}));
  TESSERA_ASSIGN_OR_RETURN(Tensor * y, ctx.NewTensor(Type::kF32, {8, 2, 4}));
  TESSERA_ASSIGN_OR_RETURN(Tensor * pos, ctx.NewTensor(Type::kI32, {4}));
  Named(x, "x", kFlagInput);
  Named(y, "y", kFlagInput);
  Named(pos, "pos", kFlagInput);
  TESSERA_ASSIGN_OR_RETURN(Tensor * a, Dup(ctx, x));
  TESSERA_ASSIGN_OR_RETURN(Tensor * r, op.build(ctx, a, y, pos));
  TESSERA_RETURN_IF_ERROR(graph.Expand(r));
  return std::make_pair(a, r);
}

TEST_F(GraphAllocatorTest, InPlaceForEveryOpThatMayRunInPlace) {
  for (const OpCase& op : InPlaceOps()) {
    SCOPED_TRACE(op.name);
    Context ctx;
    Graph graph;
    absl::StatusOr<std::pair<Tensor*, Tensor*>> ar =
        BuildOpCase(ctx, op, graph);
    ASSERT_TRUE(ar.ok()) << ar.status();
    GraphAllocator alloc({&type()});
    ASSERT_TRUE(alloc.Alloc(graph).ok());
    EXPECT_EQ(ar->second->data, ar->first->data);
    EXPECT_EQ(FindLiveOverlap(graph), "");
  }
}

TEST_F(GraphAllocatorTest, NoInPlaceForOtherOps) {
  for (const OpCase& op : NotInPlaceOps()) {
    SCOPED_TRACE(op.name);
    Context ctx;
    Graph graph;
    absl::StatusOr<std::pair<Tensor*, Tensor*>> ar =
        BuildOpCase(ctx, op, graph);
    ASSERT_TRUE(ar.ok()) << ar.status();
    GraphAllocator alloc({&type()});
    ASSERT_TRUE(alloc.Alloc(graph).ok());
    EXPECT_NE(ar->second->data, ar->first->data);
    EXPECT_EQ(FindLiveOverlap(graph), "");
  }
}

// x (input) -> a = Dup(x); the test adds the rest.
class InPlaceRulesTest : public GraphAllocatorTest {
 protected:
  void SetUp() override {
    absl::StatusOr<Tensor*> x = ctx_.NewTensor(Type::kF32, {64});
    ASSERT_TRUE(x.ok());
    x_ = Named(*x, "x", kFlagInput);
    absl::StatusOr<Tensor*> a = Dup(ctx_, x_);
    ASSERT_TRUE(a.ok());
    a_ = Named(*a, "a");
  }

  void Alloc(std::initializer_list<Tensor*> roots) {
    for (Tensor* t : roots) ASSERT_TRUE(graph_.Expand(t).ok());
    GraphAllocator alloc({&type()});
    absl::Status status = alloc.Alloc(graph_);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(FindLiveOverlap(graph_), "");
    buffer_size_ = alloc.buffer_size(0);
  }

  Tensor* x_ = nullptr;
  Tensor* a_ = nullptr;
  Graph graph_;
  size_t buffer_size_ = 0;
};

TEST_F(InPlaceRulesTest, NotOverAnOutput) {
  a_->flags |= kFlagOutput;
  absl::StatusOr<Tensor*> r = Scale(ctx_, a_, 2.0f);
  ASSERT_TRUE(r.ok());
  Alloc({*r});
  EXPECT_NE((*r)->data, a_->data);
}

TEST_F(InPlaceRulesTest, NotOverAnInput) {
  absl::StatusOr<Tensor*> r = Scale(ctx_, x_, 2.0f);
  ASSERT_TRUE(r.ok());
  Alloc({*r, a_});
  EXPECT_NE((*r)->data, x_->data);
}

TEST_F(InPlaceRulesTest, NotOverASourceWithLaterConsumers) {
  absl::StatusOr<Tensor*> r = Scale(ctx_, a_, 2.0f);
  ASSERT_TRUE(r.ok());
  absl::StatusOr<Tensor*> s = Add(ctx_, *r, a_);  // reads a after r
  ASSERT_TRUE(s.ok());
  Alloc({*s});
  EXPECT_NE((*r)->data, a_->data);
  // s is r's last consumer: it may take r's memory.
  EXPECT_EQ((*s)->data, (*r)->data);
}

TEST_F(InPlaceRulesTest, NotOverAView) {
  absl::StatusOr<Tensor*> v = Reshape(ctx_, a_, {8, 8});
  ASSERT_TRUE(v.ok());
  absl::StatusOr<Tensor*> r = Scale(ctx_, *v, 2.0f);
  ASSERT_TRUE(r.ok());
  Alloc({*r});
  EXPECT_NE((*r)->data, a_->data);
}

TEST_F(InPlaceRulesTest, NotWhileAViewOfTheSourceIsStillNeeded) {
  absl::StatusOr<Tensor*> v = View(ctx_, a_, {32}, {}, 32 * sizeof(float));
  ASSERT_TRUE(v.ok());
  absl::StatusOr<Tensor*> r = Scale(ctx_, a_, 2.0f);
  ASSERT_TRUE(r.ok());
  absl::StatusOr<Tensor*> w = Cont(ctx_, *v);  // reads a through v after r
  ASSERT_TRUE(w.ok());
  Alloc({*r, *w});
  ASSERT_LT(std::find(graph_.nodes().begin(), graph_.nodes().end(), *r),
            std::find(graph_.nodes().begin(), graph_.nodes().end(), *w));
  EXPECT_NE((*r)->data, a_->data);
  EXPECT_EQ((*v)->data, static_cast<char*>(a_->data) + 32 * sizeof(float));
}

TEST_F(InPlaceRulesTest, NotAcrossBufferIds) {
  CpuDeviceOptions options;
  options.name = "cpu1";
  CpuDevice other(options);
  absl::StatusOr<Tensor*> r = Scale(ctx_, a_, 2.0f);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(graph_.Expand(*r).ok());
  ASSERT_EQ(graph_.nodes().size(), 2u);  // a, r
  GraphAllocator alloc({&type(), &other.buffer_type()});
  const std::vector<int> node_ids = {0, 1};
  ASSERT_TRUE(alloc.Alloc(graph_, node_ids).ok());
  EXPECT_EQ(a_->buffer, alloc.buffer(0));
  EXPECT_EQ((*r)->buffer, alloc.buffer(1));
}

TEST_F(GraphAllocatorTest, OutputsAreNeverOverwrittenLaterInTheGraph) {
  absl::StatusOr<Tensor*> x = ctx_.NewTensor(Type::kF32, {256});
  ASSERT_TRUE(x.ok());
  Named(*x, "x", kFlagInput);
  absl::StatusOr<Tensor*> out = Dup(ctx_, *x);
  ASSERT_TRUE(out.ok());
  Named(*out, "out", kFlagOutput);
  std::vector<Tensor*> later;
  Tensor* t = *out;
  for (int i = 0; i < 16; ++i) {
    // Alternate ops that could run in place with ones that cannot.
    absl::StatusOr<Tensor*> next =
        i % 2 == 0 ? Scale(ctx_, t, 2.0f) : Dup(ctx_, t);
    ASSERT_TRUE(next.ok());
    t = *next;
    later.push_back(t);
  }
  Graph graph;
  ASSERT_TRUE(graph.Expand(t).ok());
  GraphAllocator alloc({&type()});
  ASSERT_TRUE(alloc.Alloc(graph).ok());
  const uintptr_t o0 = Address((*out)->data);
  const uintptr_t o1 = o0 + (*out)->NumBytes();
  for (const Tensor* l : later) {
    const uintptr_t l0 = Address(l->data);
    EXPECT_TRUE(l0 + l->NumBytes() <= o0 || o1 <= l0) << Describe(*l);
  }
  EXPECT_EQ(FindLiveOverlap(graph), "");
}

TEST_F(GraphAllocatorTest, ReserveOfTheLargestGraphMakesLaterAllocsFree) {
  GraphAllocator alloc({&type()});
  {
    Block big;
    ASSERT_TRUE(BuildBlock(ctx_, 32, big).ok());
    absl::StatusOr<std::unique_ptr<Buffer>> weights =
        AllocTensors(type(), big.weights);
    ASSERT_TRUE(weights.ok());
    absl::Status status = alloc.Reserve(big.graph);
    ASSERT_TRUE(status.ok()) << status;
    for (const Tensor* t : big.graph.nodes()) EXPECT_EQ(t->data, nullptr);
    EXPECT_EQ(big.x->data, nullptr);
    EXPECT_EQ(big.pos->data, nullptr);
  }
  EXPECT_EQ(alloc.allocations(), 1);
  const size_t reserved = alloc.buffer_size(0);
  EXPECT_GT(reserved, 0u);
  const Buffer* buffer = alloc.buffer(0);

  for (int64_t n : {32, 16, 7, 1, 32}) {
    SCOPED_TRACE(n);
    Context ctx;
    Block b;
    ASSERT_TRUE(BuildBlock(ctx, n, b).ok());
    absl::StatusOr<std::unique_ptr<Buffer>> weights =
        AllocTensors(type(), b.weights);
    ASSERT_TRUE(weights.ok());
    absl::Status status = alloc.Alloc(b.graph);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(alloc.allocations(), 1);
    EXPECT_EQ(alloc.buffer_size(0), reserved);
    EXPECT_EQ(alloc.buffer(0), buffer);
    const absl::flat_hash_set<const Tensor*> placed(b.weights.begin(),
                                                    b.weights.end());
    ExpectPlaced(b.graph, alloc.buffer(0), placed);
    EXPECT_EQ(FindLiveOverlap(b.graph), "");
  }
}

TEST_F(GraphAllocatorTest, AllocGrowsABufferThatIsTooSmall) {
  GraphAllocator alloc({&type()});
  Block small;
  ASSERT_TRUE(BuildBlock(ctx_, 2, small).ok());
  ASSERT_TRUE(alloc.Alloc(small.graph).ok());
  EXPECT_EQ(alloc.allocations(), 1);
  const size_t small_size = alloc.buffer_size(0);

  Block big;
  ASSERT_TRUE(BuildBlock(ctx_, 32, big).ok());
  ASSERT_TRUE(alloc.Alloc(big.graph).ok());
  EXPECT_EQ(alloc.allocations(), 2);
  EXPECT_GT(alloc.buffer_size(0), small_size);
  EXPECT_EQ(alloc.buffer(0)->usage(), BufferUsage::kCompute);
  EXPECT_EQ(device_.memory_used(), alloc.buffer_size(0));
  ExpectPlaced(big.graph, alloc.buffer(0));
  EXPECT_EQ(FindLiveOverlap(big.graph), "");
}

TEST_F(GraphAllocatorTest, EachBufferIdHoldsItsTensors) {
  CpuDeviceOptions options;
  options.name = "cpu1";
  CpuDevice other(options);

  // x (id 1) -> a = Dup (0) -> b = Scale (1) -> c = Reshape(b) (0, a view)
  //   -> d = Dup(c) (0) -> e = Add(d, a) (1)
  absl::StatusOr<Tensor*> x = ctx_.NewTensor(Type::kF32, {16, 4});
  ASSERT_TRUE(x.ok());
  Named(*x, "x", kFlagInput);
  absl::StatusOr<Tensor*> a = Dup(ctx_, *x);
  ASSERT_TRUE(a.ok());
  absl::StatusOr<Tensor*> b = Scale(ctx_, *a, 2.0f);
  ASSERT_TRUE(b.ok());
  absl::StatusOr<Tensor*> c = Reshape(ctx_, *b, {64});
  ASSERT_TRUE(c.ok());
  absl::StatusOr<Tensor*> d = Dup(ctx_, *c);
  ASSERT_TRUE(d.ok());
  absl::StatusOr<Tensor*> a_flat = Reshape(ctx_, *a, {64});
  ASSERT_TRUE(a_flat.ok());
  absl::StatusOr<Tensor*> e = Add(ctx_, *d, *a_flat);
  ASSERT_TRUE(e.ok());
  Graph graph;
  ASSERT_TRUE(graph.Expand(*e).ok());

  const absl::flat_hash_map<const Tensor*, int> want = {
      {*x, 1}, {*a, 0}, {*b, 1}, {*c, 0}, {*d, 0}, {*a_flat, 1}, {*e, 1}};
  std::vector<int> node_ids, leaf_ids;
  for (const Tensor* t : graph.nodes()) node_ids.push_back(want.at(t));
  for (const Tensor* t : graph.leafs()) leaf_ids.push_back(want.at(t));

  GraphAllocator alloc({&type(), &other.buffer_type()});
  absl::Status status = alloc.Alloc(graph, node_ids, leaf_ids);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(alloc.allocations(), 2);
  for (const auto& [t, id] : want) {
    SCOPED_TRACE(Describe(*t));
    ASSERT_NE(t->data, nullptr);
    if (t->IsView()) {
      // A view lives in its source's buffer, whatever id it was given.
      EXPECT_EQ(t->buffer, t->view_src->buffer);
      EXPECT_EQ(t->data, t->view_src->data);
      continue;
    }
    const Buffer* buffer = alloc.buffer(id);
    ASSERT_NE(buffer, nullptr);
    EXPECT_EQ(t->buffer, buffer);
    const char* base = static_cast<const char*>(alloc.buffer(id)->base());
    EXPECT_GE(static_cast<const char*>(t->data), base);
    EXPECT_LE(static_cast<const char*>(t->data) + t->NumBytes(),
              base + buffer->size());
  }
  EXPECT_EQ((*c)->buffer, alloc.buffer(1));
  EXPECT_EQ(device_.memory_used(), alloc.buffer_size(0));
  EXPECT_EQ(other.memory_used(), alloc.buffer_size(1));
  EXPECT_EQ(FindLiveOverlap(graph), "");
}

TEST_F(GraphAllocatorTest, RejectsBadIdLists) {
  Graph graph;
  std::vector<Tensor*> chain;
  ASSERT_TRUE(
      BuildChain(
          ctx_, 3, 16, [&](Tensor* t) { return Dup(ctx_, t); }, graph, &chain)
          .ok());
  ASSERT_EQ(graph.nodes().size(), 3u);
  ASSERT_EQ(graph.leafs().size(), 1u);
  CpuDeviceOptions options;
  options.name = "cpu1";
  CpuDevice other(options);
  GraphAllocator alloc({&type(), &other.buffer_type()});

  struct Case {
    std::vector<int> nodes, leafs;
  };
  const std::vector<Case> cases = {
      {{0, 1}, {}},        // too few node ids
      {{0, 1, 0, 1}, {}},  // too many
      {{}, {0, 0}},        // too many leaf ids
      {{0, 2, 0}, {}},     // no buffer id 2
      {{0, -1, 0}, {}},    // negative
      {{0, 0, 0}, {7}},    // leaf id out of range
  };
  for (const Case& c : cases) {
    EXPECT_EQ(alloc.Reserve(graph, c.nodes, c.leafs).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(alloc.Alloc(graph, c.nodes, c.leafs).code(),
              absl::StatusCode::kInvalidArgument);
  }
  GraphAllocator none({});
  EXPECT_EQ(none.Alloc(graph).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(alloc.allocations(), 0);
  for (const Tensor* t : chain) EXPECT_EQ(t->data, nullptr);
}

TEST_F(GraphAllocatorTest, PrePlacedTensorsAreNeitherPlannedNorReused) {
  absl::StatusOr<Tensor*> w = ctx_.NewTensor(Type::kF32, {64});
  ASSERT_TRUE(w.ok());
  Named(*w, "w", kFlagParam);
  absl::StatusOr<Tensor*> x = ctx_.NewTensor(Type::kF32, {64});
  ASSERT_TRUE(x.ok());
  Named(*x, "x", kFlagInput);
  absl::StatusOr<Tensor*> a = Dup(ctx_, *x);  // the client places this one
  ASSERT_TRUE(a.ok());
  std::vector<Tensor*> placed = {*w, *a};
  absl::StatusOr<std::unique_ptr<Buffer>> weights =
      AllocTensors(type(), placed);
  ASSERT_TRUE(weights.ok());
  void* w_data = (*w)->data;
  void* a_data = (*a)->data;

  absl::StatusOr<Tensor*> r = Scale(ctx_, *w, 2.0f);  // could run in place
  ASSERT_TRUE(r.ok());
  absl::StatusOr<Tensor*> s = Mul(ctx_, *a, *r);  // could run in place
  ASSERT_TRUE(s.ok());
  Graph graph;
  ASSERT_TRUE(graph.Expand(*s).ok());
  GraphAllocator alloc({&type()});
  ASSERT_TRUE(alloc.Alloc(graph).ok());
  EXPECT_EQ((*w)->data, w_data);
  EXPECT_EQ((*a)->data, a_data);
  EXPECT_EQ((*w)->buffer, weights->get());
  EXPECT_EQ((*r)->buffer, alloc.buffer(0));
  EXPECT_EQ((*s)->buffer, alloc.buffer(0));
  // x, r and s: nothing of the weights buffer.
  EXPECT_EQ(alloc.buffer_size(0), 3u * 256u);
}

TEST_F(GraphAllocatorTest, GraphOfViewsOfPlacedTensorsAllocatesNothing) {
  absl::StatusOr<Tensor*> w = ctx_.NewTensor(Type::kF32, {8, 8});
  ASSERT_TRUE(w.ok());
  std::vector<Tensor*> placed = {*w};
  absl::StatusOr<std::unique_ptr<Buffer>> weights =
      AllocTensors(type(), placed);
  ASSERT_TRUE(weights.ok());
  absl::StatusOr<Tensor*> v =
      View(ctx_, *w, {8, 4}, {8 * sizeof(float)}, 4 * 8 * sizeof(float));
  ASSERT_TRUE(v.ok());
  absl::StatusOr<Tensor*> t = Transpose(ctx_, *v);
  ASSERT_TRUE(t.ok());
  Graph graph;
  ASSERT_TRUE(graph.Expand(*t).ok());

  GraphAllocator alloc({&type()});
  ASSERT_TRUE(alloc.Reserve(graph).ok());
  ASSERT_TRUE(alloc.Alloc(graph).ok());
  EXPECT_EQ(alloc.allocations(), 0);
  EXPECT_EQ(alloc.buffer(0), nullptr);
  EXPECT_EQ(alloc.buffer_size(0), 0u);
  char* base = static_cast<char*>((*w)->data);
  EXPECT_EQ((*v)->data, base + 128);
  EXPECT_EQ((*t)->data, base + 128);
  EXPECT_EQ((*t)->buffer, weights->get());
}

TEST(GraphAllocatorLimitsTest, ResourceExhaustedFromTheBufferType) {
  CpuDeviceOptions options;
  options.memory_limit = 4096;
  CpuDevice device(options);
  Context ctx;
  Block b;
  ASSERT_TRUE(BuildBlock(ctx, 32, b).ok());
  GraphAllocator alloc({&device.buffer_type()});
  EXPECT_EQ(alloc.Reserve(b.graph).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(alloc.Alloc(b.graph).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(alloc.allocations(), 0);
  EXPECT_EQ(alloc.buffer(0), nullptr);
  EXPECT_EQ(b.out->data, nullptr);
}

}  // namespace
}  // namespace tessera
