#include "server/decoding/graph_decoder.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backend/cpu/cpu_device.h"
#include "gmock/gmock.h"
#include "graph/context.h"
#include "graph/ops.h"
#include "gtest/gtest.h"

namespace tessera::server {
namespace {

using ::testing::HasSubstr;

// Encodes tensors built with graph/ops.h as the wire does: ids by position,
// sources and view sources by id.
class Encoder {
 public:
  v1::TensorDef& Add(const Tensor* t) {
    const uint32_t id = static_cast<uint32_t>(def_.tensors_size());
    ids_[t] = id;
    v1::TensorDef& td = *def_.add_tensors();
    td.set_id(id);
    td.set_type(static_cast<int32_t>(t->type));
    for (int64_t n : t->ne) td.add_ne(n);
    for (size_t nb : t->nb) td.add_nb(nb);
    td.set_op(static_cast<int32_t>(t->op));
    for (int32_t p : t->op_params) td.add_op_params(p);
    int n_src = 0;
    for (int i = 0; i < kMaxSrc; ++i) {
      if (t->src[i] != nullptr) n_src = i + 1;
    }
    for (int i = 0; i < n_src; ++i) {
      td.add_src(t->src[i] == nullptr ? -1 : ids_.at(t->src[i]));
    }
    if (t->view_src != nullptr) {
      td.set_view_src(ids_.at(t->view_src));
      td.set_view_offs(t->view_offs);
    }
    td.set_name(t->name);
    td.set_flags(t->flags);
    return td;
  }
  v1::GraphDef& def() { return def_; }

 private:
  v1::GraphDef def_;
  absl::flat_hash_map<const Tensor*, uint32_t> ids_;
};

class GraphDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    buffer_ = std::shared_ptr<Buffer>(
        device_.buffer_type().Alloc(1024).value().release());
  }

  BufferResolver Resolver() {
    return [this](uint64_t handle) -> absl::StatusOr<std::shared_ptr<Buffer>> {
      if (handle == 7) return buffer_;
      return absl::NotFoundError("no such buffer");
    };
  }

  absl::StatusOr<std::unique_ptr<DecodedGraph>> Decode(
      const v1::GraphDef& def, DecodeLimits limits = {}) {
    return DecodeGraph(def, Resolver(), limits);
  }

  // a, b inputs [4, 3]; c = a + b.
  v1::GraphDef AddGraph() {
    Tensor* a = ctx_.NewTensor(Type::kF32, {4, 3}).value();
    a->name = "a";
    Tensor* b = ctx_.NewTensor(Type::kF32, {4, 3}).value();
    b->name = "b";
    Tensor* c = Add(ctx_, a, b).value();
    c->name = "c";
    Encoder e;
    e.Add(a);
    e.Add(b);
    e.Add(c);
    return e.def();
  }

  CpuDevice device_{CpuDeviceOptions{}};
  std::shared_ptr<Buffer> buffer_;
  Context ctx_;
};

TEST_F(GraphDecoderTest, DecodesAddOfTwoInputs) {
  auto decoded = Decode(AddGraph());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const DecodedGraph& g = **decoded;
  ASSERT_EQ(g.graph->nodes().size(), 1u);
  ASSERT_EQ(g.graph->leafs().size(), 2u);
  const Tensor* c = g.graph->nodes()[0];
  EXPECT_EQ(c->op, Op::kAdd);
  EXPECT_EQ(c->name, "c");
  EXPECT_EQ(c->src[0], g.by_id.at(0));
  EXPECT_EQ(c->src[1], g.by_id.at(1));
  EXPECT_EQ(c->ne[0], 4);
  EXPECT_EQ(c->ne[1], 3);
  ASSERT_EQ(g.inputs.size(), 2u);
  EXPECT_TRUE(g.inputs[0]->HasFlag(kFlagInput));
  EXPECT_EQ(g.inputs[0]->name, "a");
  EXPECT_FALSE(c->HasFlag(kFlagInput));
  EXPECT_TRUE(g.InGraph(c));
}

// What the builders accept but no kernel computes (a source dimension of
// zero that does not broadcast, zero heads) is refused while decoding,
// before any memory is placed.
TEST_F(GraphDecoderTest, RefusesZeroSizeDimensionsTheKernelsRefuse) {
  {
    Tensor* a = ctx_.NewTensor(Type::kF32, {4, 3, 0, 1}).value();
    Tensor* b = ctx_.NewTensor(Type::kF32, {4, 5, 0, 1}).value();
    Tensor* y = MulMat(ctx_, a, b).value();
    Encoder e;
    e.Add(a);
    e.Add(b);
    e.Add(y);
    auto decoded = Decode(e.def());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(decoded.status().message(), HasSubstr("do not multiply"));
  }
  {
    Tensor* q = ctx_.NewTensor(Type::kF32, {4, 1, 0, 1}).value();
    Tensor* k = ctx_.NewTensor(Type::kF32, {4, 2, 0, 1}).value();
    Tensor* v = ctx_.NewTensor(Type::kF32, {4, 2, 0, 1}).value();
    Tensor* o = FlashAttnExt(ctx_, q, k, v, nullptr, 1.0f, 0.0f, 0.0f).value();
    Encoder e;
    for (Tensor* t : {q, k, v, o}) e.Add(t);
    auto decoded = Decode(e.def());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(decoded.status().message(), HasSubstr("does not fit q"));
  }
}

// An empty tensor that the kernels compute (nothing to do) still decodes.
TEST_F(GraphDecoderTest, AcceptsEmptyTensorsTheKernelsCompute) {
  Tensor* a = ctx_.NewTensor(Type::kF32, {4, 0}).value();
  Tensor* b = ctx_.NewTensor(Type::kF32, {4, 1}).value();
  Tensor* c = Add(ctx_, a, b).value();
  Encoder e;
  e.Add(a);
  e.Add(b);
  e.Add(c);
  auto decoded = Decode(e.def());
  EXPECT_TRUE(decoded.ok()) << decoded.status();
}

TEST_F(GraphDecoderTest, PlacesWeightsInTheirBuffer) {
  Tensor* w = ctx_.NewTensor(Type::kF32, {8, 2}).value();
  Tensor* x = ctx_.NewTensor(Type::kF32, {8, 1}).value();
  Tensor* y = MulMat(ctx_, w, x).value();
  Encoder e;
  v1::TensorDef& wd = e.Add(w);
  wd.mutable_data()->set_buffer(7);
  wd.mutable_data()->set_offset(256);
  e.Add(x);
  e.Add(y);
  auto decoded = Decode(e.def());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const Tensor* weight = (*decoded)->by_id.at(0);
  EXPECT_EQ(weight->buffer, buffer_.get());
  EXPECT_EQ(weight->data, static_cast<char*>(buffer_->base()) + 256);
  EXPECT_FALSE(weight->HasFlag(kFlagInput));
  ASSERT_EQ((*decoded)->inputs.size(), 1u);
  EXPECT_EQ((*decoded)->inputs[0], (*decoded)->by_id.at(1));
  ASSERT_EQ((*decoded)->buffers.size(), 1u);
  EXPECT_EQ((*decoded)->buffers[0], buffer_);
}

TEST_F(GraphDecoderTest, AcceptsViewsAndExplicitNodeOrder) {
  Tensor* a = ctx_.NewTensor(Type::kF32, {6, 4}).value();
  Tensor* s = Scale(ctx_, a, 2.0f).value();
  Tensor* t = Transpose(ctx_, s).value();
  Tensor* r = Cont(ctx_, t).value();
  Tensor* unused = Sqr(ctx_, a).value();
  Encoder e;
  e.Add(a);
  e.Add(s);
  e.Add(t);
  e.Add(r);
  e.Add(unused);
  e.def().add_nodes(1);
  e.def().add_nodes(2);
  e.def().add_nodes(3);
  auto decoded = Decode(e.def());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const Graph& g = *(*decoded)->graph;
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(g.nodes()[1]->op, Op::kTranspose);
  EXPECT_EQ(g.nodes()[1]->view_src, g.nodes()[0]);
  EXPECT_FALSE((*decoded)->InGraph((*decoded)->by_id.at(4)));
}

TEST_F(GraphDecoderTest, EmptyNodeListMeansEveryOpInOrder) {
  auto decoded = Decode(AddGraph());
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ((*decoded)->graph->nodes()[0], (*decoded)->by_id.at(2));
}

// Each case breaks one thing of the Add graph; the message must name the
// tensor and the problem.
struct RejectCase {
  std::string name;
  std::function<void(v1::GraphDef&)> mutate;
  absl::StatusCode code;
  std::string message;
};

class GraphDecoderRejectTest
    : public GraphDecoderTest,
      public ::testing::WithParamInterface<RejectCase> {};

TEST_P(GraphDecoderRejectTest, Rejects) {
  v1::GraphDef def = AddGraph();
  GetParam().mutate(def);
  auto decoded = Decode(def, {.max_tensors = 16});
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), GetParam().code) << decoded.status();
  EXPECT_THAT(decoded.status().message(), HasSubstr(GetParam().message));
}

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

INSTANTIATE_TEST_SUITE_P(
    Cases, GraphDecoderRejectTest,
    ::testing::Values(
        RejectCase{"UnknownType",
                   [](v1::GraphDef& d) { d.mutable_tensors(0)->set_type(42); },
                   absl::StatusCode::kInvalidArgument,
                   "tensor 0 (\"a\"): unknown type 42"},
        RejectCase{"UnknownOp",
                   [](v1::GraphDef& d) { d.mutable_tensors(2)->set_op(999); },
                   absl::StatusCode::kInvalidArgument,
                   "tensor 2 (\"c\"): unknown op 999"},
        RejectCase{"NegativeOp",
                   [](v1::GraphDef& d) { d.mutable_tensors(2)->set_op(-1); },
                   absl::StatusCode::kInvalidArgument, "unknown op -1"},
        RejectCase{"FiveDims",
                   [](v1::GraphDef& d) { d.mutable_tensors(0)->add_ne(1); },
                   absl::StatusCode::kInvalidArgument,
                   "tensor 0 (\"a\"): 5 dimensions"},
        RejectCase{"NoDims",
                   [](v1::GraphDef& d) { d.mutable_tensors(0)->clear_ne(); },
                   absl::StatusCode::kInvalidArgument, "0 dimensions"},
        RejectCase{"NegativeDim",
                   [](v1::GraphDef& d) { d.mutable_tensors(0)->set_ne(1, -3); },
                   absl::StatusCode::kInvalidArgument, "negative dimension"},
        RejectCase{"OverflowingShape",
                   [](v1::GraphDef& d) {
                     auto* t = d.mutable_tensors(0);
                     t->clear_nb();
                     for (int i = 0; i < 4; ++i) t->set_ne(i, int64_t{1} << 40);
                   },
                   absl::StatusCode::kInvalidArgument, "overflows"},
        RejectCase{"ThreeStrides",
                   [](v1::GraphDef& d) {
                     d.mutable_tensors(0)->mutable_nb()->RemoveLast();
                   },
                   absl::StatusCode::kInvalidArgument, "3 strides"},
        RejectCase{"WrongElementStride",
                   [](v1::GraphDef& d) { d.mutable_tensors(0)->set_nb(0, 2); },
                   absl::StatusCode::kInvalidArgument, "nb[0] = 2, want 4"},
        RejectCase{"OverflowingStrides",
                   [](v1::GraphDef& d) {
                     d.mutable_tensors(0)->set_nb(1, kMax64 / 2);
                   },
                   absl::StatusCode::kInvalidArgument, "byte span overflows"},
        RejectCase{"TooManyOpParams",
                   [](v1::GraphDef& d) {
                     d.mutable_tensors(2)->add_op_params(0);
                   },
                   absl::StatusCode::kInvalidArgument, "17 op_params"},
        RejectCase{"TooManySources",
                   [](v1::GraphDef& d) {
                     for (int i = 0; i < 9; ++i) d.mutable_tensors(2)->add_src(0);
                   },
                   absl::StatusCode::kInvalidArgument, "11 sources"},
        RejectCase{"ForwardReference",
                   [](v1::GraphDef& d) { d.mutable_tensors(2)->set_src(1, 5); },
                   absl::StatusCode::kInvalidArgument,
                   "tensor 2 (\"c\"): src[1] 5 is not a tensor defined before"},
        RejectCase{"SelfCycle",
                   [](v1::GraphDef& d) { d.mutable_tensors(2)->set_src(0, 2); },
                   absl::StatusCode::kInvalidArgument,
                   "src[0] 2 is not a tensor defined before"},
        RejectCase{"TwoNodeCycle",
                   [](v1::GraphDef& d) {
                     // c reads d, d reads c: whichever comes first refers
                     // forward.
                     v1::TensorDef extra = d.tensors(2);
                     extra.set_id(3);
                     extra.set_src(0, 2);
                     d.mutable_tensors(2)->set_src(1, 3);
                     *d.add_tensors() = extra;
                   },
                   absl::StatusCode::kInvalidArgument,
                   "src[1] 3 is not a tensor defined before"},
        RejectCase{"BadSourceValue",
                   [](v1::GraphDef& d) { d.mutable_tensors(2)->set_src(1, -7); },
                   absl::StatusCode::kInvalidArgument, "src[1] -7"},
        RejectCase{"ForwardViewSource",
                   [](v1::GraphDef& d) {
                     d.mutable_tensors(0)->set_view_src(2);
                   },
                   absl::StatusCode::kInvalidArgument,
                   "view_src 2 is not a tensor defined before"},
        RejectCase{"DuplicateId",
                   [](v1::GraphDef& d) { d.mutable_tensors(1)->set_id(0); },
                   absl::StatusCode::kInvalidArgument, "duplicate id"},
        RejectCase{"WrongResultShape",
                   [](v1::GraphDef& d) {
                     auto* t = d.mutable_tensors(2);
                     t->set_ne(1, 2);
                     t->clear_nb();
                   },
                   absl::StatusCode::kInvalidArgument, "tensor 2 (\"c\")"},
        RejectCase{"NonBroadcastableSources",
                   [](v1::GraphDef& d) {
                     auto* b = d.mutable_tensors(1);
                     b->set_ne(1, 2);
                     b->clear_nb();
                   },
                   absl::StatusCode::kInvalidArgument, "tensor 2 (\"c\")"},
        RejectCase{"WrongResultType",
                   [](v1::GraphDef& d) {
                     auto* t = d.mutable_tensors(2);
                     t->set_type(static_cast<int>(Type::kF16));
                     t->clear_nb();
                   },
                   absl::StatusCode::kInvalidArgument, "tensor 2 (\"c\")"},
        RejectCase{"LeafWithSources",
                   [](v1::GraphDef& d) { d.mutable_tensors(1)->add_src(0); },
                   absl::StatusCode::kInvalidArgument, "a leaf has sources"},
        RejectCase{"UnknownFlags",
                   [](v1::GraphDef& d) { d.mutable_tensors(0)->set_flags(64); },
                   absl::StatusCode::kInvalidArgument, "unknown flags 64"},
        RejectCase{"LongName",
                   [](v1::GraphDef& d) {
                     d.mutable_tensors(0)->set_name(std::string(300, 'x'));
                   },
                   absl::StatusCode::kInvalidArgument, "name of 300 bytes"},
        RejectCase{"DataOnAView",
                   [](v1::GraphDef& d) {
                     d.mutable_tensors(2)->set_view_src(0);
                     d.mutable_tensors(2)->mutable_data()->set_buffer(7);
                   },
                   absl::StatusCode::kInvalidArgument,
                   "a view may not have data"},
        RejectCase{"DataOutsideBuffer",
                   [](v1::GraphDef& d) {
                     auto* data = d.mutable_tensors(0)->mutable_data();
                     data->set_buffer(7);
                     data->set_offset(1000);
                   },
                   absl::StatusCode::kInvalidArgument,
                   "data of 48 bytes at offset 1000 is outside buffer 7"},
        RejectCase{"MisalignedData",
                   [](v1::GraphDef& d) {
                     auto* data = d.mutable_tensors(0)->mutable_data();
                     data->set_buffer(7);
                     data->set_offset(2);
                   },
                   absl::StatusCode::kInvalidArgument,
                   "data at offset 2 of buffer 7 is not a multiple of 4"},
        RejectCase{"MisalignedView",
                   [](v1::GraphDef& d) {
                     // c as a 4-float view at byte 2 of a's 48 bytes.
                     auto* t = d.mutable_tensors(2);
                     t->set_op(static_cast<int>(Op::kView));
                     t->clear_src();
                     t->add_src(0);
                     t->set_view_src(0);
                     t->set_view_offs(2);
                     t->set_ne(1, 1);
                     t->set_op_params(0, 2);
                   },
                   absl::StatusCode::kInvalidArgument,
                   "view_offs 2 is not a multiple of 4"},
        RejectCase{"DataOffsetOverflows",
                   [](v1::GraphDef& d) {
                     auto* data = d.mutable_tensors(0)->mutable_data();
                     data->set_buffer(7);
                     data->set_offset(kMax64 - 8);
                   },
                   absl::StatusCode::kInvalidArgument, "is outside buffer 7"},
        RejectCase{"DataInAnotherSessionsBuffer",
                   [](v1::GraphDef& d) {
                     d.mutable_tensors(0)->mutable_data()->set_buffer(8);
                   },
                   absl::StatusCode::kNotFound, "tensor 0 (\"a\"): data"},
        RejectCase{"ViewOutsideSource",
                   [](v1::GraphDef& d) {
                     // c as a 4-float view at byte 40 of a's 48 bytes.
                     auto* t = d.mutable_tensors(2);
                     t->set_op(static_cast<int>(Op::kView));
                     t->clear_src();
                     t->add_src(0);
                     t->set_view_src(0);
                     t->set_view_offs(40);
                     t->set_ne(1, 1);
                     t->set_op_params(0, 40);
                   },
                   absl::StatusCode::kInvalidArgument, "tensor 2 (\"c\")"},
        RejectCase{"TooManyTensors",
                   [](v1::GraphDef& d) {
                     for (int i = 3; i < 20; ++i) {
                       v1::TensorDef extra = d.tensors(0);
                       extra.set_id(i);
                       *d.add_tensors() = extra;
                     }
                   },
                   absl::StatusCode::kResourceExhausted,
                   "exceed the server's max_graph_nodes 16"},
        RejectCase{"NodeListNamesUnknownId",
                   [](v1::GraphDef& d) { d.add_nodes(9); },
                   absl::StatusCode::kInvalidArgument,
                   "nodes[0]: no tensor with id 9"},
        RejectCase{"NodeListNamesALeaf",
                   [](v1::GraphDef& d) { d.add_nodes(0); },
                   absl::StatusCode::kInvalidArgument,
                   "tensor 0 (\"a\"): listed in nodes[0] but has no op"},
        RejectCase{"NodeListedTwice",
                   [](v1::GraphDef& d) {
                     d.add_nodes(2);
                     d.add_nodes(2);
                   },
                   absl::StatusCode::kInvalidArgument, "listed twice"},
        RejectCase{"NodeBeforeItsSource",
                   [](v1::GraphDef& d) {
                     // d = c * c, listed before c.
                     v1::TensorDef extra = d.tensors(2);
                     extra.set_id(3);
                     extra.set_op(static_cast<int>(Op::kMul));
                     extra.set_src(0, 2);
                     extra.set_src(1, 2);
                     extra.set_name("d");
                     *d.add_tensors() = extra;
                     d.add_nodes(3);
                     d.add_nodes(2);
                   },
                   absl::StatusCode::kInvalidArgument,
                   "tensor 3 (\"d\"): its source tensor 2 (\"c\") is not a "
                   "node listed before it"}),
    [](const ::testing::TestParamInfo<RejectCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace tessera::server
