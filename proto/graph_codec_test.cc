#include "proto/graph_codec.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gmock/gmock.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "gtest/gtest.h"
#include "proto/split_state_codec.h"

namespace tessera::wire {
namespace {

using ::testing::HasSubstr;

// x (an input) and w (a weight in buffer 7 at offset 128), y = w x,
// a transposed view of y and its contiguous copy.
struct Sample {
  Context ctx;
  Graph graph;
  Tensor* x = nullptr;
  Tensor* w = nullptr;
  Tensor* z = nullptr;

  Sample() {
    x = ctx.NewTensor(Type::kF32, {8, 3}).value();
    x->name = "x";
    w = ctx.NewTensor(Type::kF32, {8, 4}).value();
    w->name = "w";
    w->flags |= kFlagParam;
    Tensor* y = MulMat(ctx, w, x).value();
    y->name = "y";
    Tensor* yt = Transpose(ctx, y).value();
    z = Cont(ctx, yt).value();
    z->name = "z";
    z->flags |= kFlagOutput;
    EXPECT_TRUE(graph.Expand(z).ok());
  }

  DataRefFn DataRef() const {
    return [w = w](const Tensor& t) -> absl::StatusOr<std::optional<v1::TensorRef>> {
      if (&t != w) return std::nullopt;
      v1::TensorRef ref;
      ref.set_buffer(7);
      ref.set_offset(128);
      return ref;
    };
  }
};

void ExpectSameTensor(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.type, b.type) << a.name;
  for (int i = 0; i < kMaxDims; ++i) {
    EXPECT_EQ(a.ne[i], b.ne[i]) << a.name;
    EXPECT_EQ(a.nb[i], b.nb[i]) << a.name;
  }
  EXPECT_EQ(a.op, b.op) << a.name;
  for (int i = 0; i < kMaxOpParams; ++i) {
    EXPECT_EQ(a.op_params[i], b.op_params[i]) << a.name;
  }
  EXPECT_EQ(a.view_offs, b.view_offs) << a.name;
  EXPECT_EQ(a.name, b.name);
}

TEST(GraphCodecTest, RoundTripKeepsStructure) {
  Sample s;
  absl::StatusOr<EncodedGraph> encoded = ToProto(s.graph, s.DataRef());
  ASSERT_TRUE(encoded.ok()) << encoded.status();

  std::vector<std::pair<uint64_t, uint64_t>> placed;
  int validated = 0;
  GraphHooks hooks;
  hooks.place_data = [&](Tensor& t, const v1::TensorRef& ref, size_t bytes) {
    EXPECT_EQ(bytes, t.NumBytes());
    placed.emplace_back(ref.buffer(), ref.offset());
    return absl::OkStatus();
  };
  hooks.validate = [&](const Tensor&) {
    ++validated;
    return absl::OkStatus();
  };
  Context ctx;
  absl::StatusOr<DecodedGraphDef> decoded =
      FromProto(encoded->def, {}, hooks, ctx);
  ASSERT_TRUE(decoded.ok()) << decoded.status();

  EXPECT_EQ(validated, encoded->def.tensors_size());
  EXPECT_THAT(placed, ::testing::ElementsAre(std::make_pair(7, 128)));
  ASSERT_EQ(decoded->graph->nodes().size(), s.graph.nodes().size());
  ASSERT_EQ(decoded->graph->leafs().size(), s.graph.leafs().size());
  // Each tensor maps to the one with its id, with the same sources.
  for (const auto& [original, id] : encoded->ids) {
    const Tensor* copy = decoded->by_id.at(id);
    ExpectSameTensor(*original, *copy);
    for (int i = 0; i < kMaxSrc; ++i) {
      if (original->src[i] == nullptr) {
        EXPECT_EQ(copy->src[i], nullptr);
      } else {
        EXPECT_EQ(copy->src[i],
                  decoded->by_id.at(encoded->ids.at(original->src[i])));
      }
    }
    if (original->view_src != nullptr) {
      EXPECT_EQ(copy->view_src,
                decoded->by_id.at(encoded->ids.at(original->view_src)));
    }
  }
  for (size_t i = 0; i < s.graph.nodes().size(); ++i) {
    EXPECT_EQ(decoded->graph->nodes()[i],
              decoded->by_id.at(encoded->ids.at(s.graph.nodes()[i])));
  }
  // x has no data: the one input. Flags travel.
  ASSERT_EQ(decoded->inputs.size(), 1u);
  EXPECT_EQ(decoded->inputs[0]->name, "x");
  EXPECT_TRUE(decoded->by_id.at(encoded->ids.at(s.w))->HasFlag(kFlagParam));
  EXPECT_TRUE(decoded->by_id.at(encoded->ids.at(s.z))->HasFlag(kFlagOutput));
}

TEST(GraphCodecTest, DataRefErrorsStopTheEncoding) {
  Sample s;
  absl::StatusOr<EncodedGraph> encoded =
      ToProto(s.graph, [](const Tensor& t) -> absl::StatusOr<std::optional<v1::TensorRef>> {
        return EncodeError(t, "is not allocated");
      });
  ASSERT_FALSE(encoded.ok());
  EXPECT_THAT(encoded.status().message(),
              HasSubstr("[EncodeGraph] tensor '"));
  EXPECT_THAT(encoded.status().message(), HasSubstr("is not allocated"));
}

TEST(GraphCodecTest, HookErrorsNameTheTensor) {
  Sample s;
  EncodedGraph encoded = ToProto(s.graph, s.DataRef()).value();
  GraphHooks hooks;
  hooks.place_data = [](Tensor&, const v1::TensorRef&, size_t) {
    return absl::NotFoundError("data: no buffer 7");
  };
  Context ctx;
  absl::StatusOr<DecodedGraphDef> decoded =
      FromProto(encoded.def, {}, hooks, ctx);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(decoded.status().message(),
              HasSubstr("(\"w\"): data: no buffer 7"));
}

TEST(GraphCodecTest, RejectsForwardSources) {
  v1::GraphDef def;
  v1::TensorDef* node = def.add_tensors();
  node->set_id(0);
  node->set_type(static_cast<int32_t>(Type::kF32));
  node->add_ne(4);
  node->set_op(static_cast<int32_t>(Op::kDup));
  node->add_src(1);
  Context ctx;
  absl::StatusOr<DecodedGraphDef> decoded = FromProto(def, {}, {}, ctx);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(),
              HasSubstr("[DecodeGraph] tensor 0: src[0] 1 is not a tensor "
                        "defined before it"));
}

TEST(GraphCodecTest, LimitsTheTensorCount) {
  Sample s;
  EncodedGraph encoded = ToProto(s.graph, s.DataRef()).value();
  Context ctx;
  absl::StatusOr<DecodedGraphDef> decoded =
      FromProto(encoded.def, {.max_tensors = 2}, {}, ctx);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(GraphCodecTest, SplitStatesRoundTrip) {
  Sample s;
  const SplitState split = SplitState::Even(1, 4, 2).value();
  SplitFn split_of =
      [&](const Tensor& t) -> absl::StatusOr<std::optional<SplitState>> {
    EXPECT_EQ(&t, s.w);  // only tensors with data are asked
    return split;
  };
  EncodedGraph encoded = ToProto(s.graph, s.DataRef(), split_of).value();
  std::vector<std::pair<std::string, SplitState>> placed;
  GraphHooks hooks;
  hooks.place_data = [](Tensor&, const v1::TensorRef&, size_t) {
    return absl::OkStatus();
  };
  hooks.place_split = [&](Tensor& t, const SplitState& state) {
    placed.emplace_back(t.name, state);
    return absl::OkStatus();
  };
  Context ctx;
  absl::StatusOr<DecodedGraphDef> decoded =
      FromProto(encoded.def, {}, hooks, ctx);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_THAT(placed, ::testing::ElementsAre(std::make_pair("w", split)));
}

TEST(GraphCodecTest, SplitStatesAreChecked) {
  Sample s;
  EncodedGraph encoded = ToProto(s.graph, s.DataRef()).value();
  GraphHooks hooks;
  hooks.place_data = [](Tensor&, const v1::TensorRef&, size_t) {
    return absl::OkStatus();
  };
  auto decode = [&](const v1::GraphDef& def) {
    Context ctx;
    return FromProto(def, {}, hooks, ctx).status();
  };
  const uint32_t w = encoded.ids.at(s.w);
  const uint32_t x = encoded.ids.at(s.x);
  // No hook: not accepted.
  v1::GraphDef def = encoded.def;
  *def.mutable_tensors(w)->mutable_split() = ToProto(SplitState::Partial());
  EXPECT_THAT(decode(def).message(),
              HasSubstr("(\"w\"): a split state is not accepted here"));
  hooks.place_split = [](Tensor&, const SplitState&) {
    return absl::InvalidArgumentError("not a meta device's buffer");
  };
  EXPECT_THAT(decode(def).message(),
              HasSubstr("(\"w\"): not a meta device's buffer"));
  // Malformed, or on a tensor without data.
  def.mutable_tensors(w)->mutable_split()->set_kind(v1::SplitStateDef::AXIS);
  EXPECT_THAT(decode(def).message(),
              HasSubstr("(\"w\"): split: AXIS with n_segments below 1"));
  def = encoded.def;
  *def.mutable_tensors(x)->mutable_split() = ToProto(SplitState::Mirrored());
  EXPECT_THAT(decode(def).message(),
              HasSubstr("(\"x\"): a split state without data"));
}

}  // namespace
}  // namespace tessera::wire
