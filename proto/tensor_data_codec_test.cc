#include "proto/tensor_data_codec.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "gtest/gtest.h"

namespace tessera::wire {
namespace {

struct Sample {
  Context ctx;
  Graph graph;
  Tensor* x = nullptr;
  Tensor* y = nullptr;
  EncodedGraph encoded;

  Sample() {
    x = ctx.NewTensor(Type::kF32, {4}).value();
    x->name = "x";
    y = Sqr(ctx, x).value();
    y->name = "y";
    EXPECT_TRUE(graph.Expand(y).ok());
    encoded = ToProto(graph, [](const Tensor&) {
                return absl::StatusOr<std::optional<v1::TensorRef>>(
                    std::nullopt);
              }).value();
  }
};

TEST(TensorDataCodecTest, InputsRoundTrip) {
  Sample s;
  const std::vector<float> in = {1, 2, 3, 4};
  v1::ExecuteRequest request;
  ASSERT_TRUE(ToProto({{s.x, in.data(), in.size() * sizeof(float)}},
                      s.encoded, *request.mutable_inputs())
                  .ok());
  ASSERT_EQ(request.inputs_size(), 1);
  absl::StatusOr<TensorSource> source = FromProto(request.inputs(0));
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->id, s.encoded.ids.at(s.x));
  ASSERT_TRUE(source->is_inline);
  ASSERT_EQ(source->bytes.size(), in.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(source->bytes.data(), in.data(), source->bytes.size()),
            0);
}

TEST(TensorDataCodecTest, RefsAndMissingSources) {
  v1::TensorData data;
  data.set_id(3);
  EXPECT_EQ(FromProto(data).status().message(), "neither data nor ref");
  data.mutable_ref()->set_buffer(9);
  data.mutable_ref()->set_offset(64);
  absl::StatusOr<TensorSource> source = FromProto(data);
  ASSERT_TRUE(source.ok());
  EXPECT_FALSE(source->is_inline);
  EXPECT_EQ(source->buffer, 9u);
  EXPECT_EQ(source->offset, 64u);
}

TEST(TensorDataCodecTest, InputsOutsideTheGraphAreRejected) {
  Sample s;
  Tensor* other = s.ctx.NewTensor(Type::kF32, {4}).value();
  const float in[4] = {};
  v1::ExecuteRequest request;
  EXPECT_EQ(ToProto({{other, in, sizeof(in)}}, s.encoded,
                    *request.mutable_inputs())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorDataCodecTest, OutputsRoundTrip) {
  Sample s;
  v1::ExecuteResponse response;
  std::string& bytes =
      AppendOutput(s.encoded.ids.at(s.y), 4 * sizeof(float),
                   *response.mutable_outputs());
  const float result[4] = {1, 4, 9, 16};
  std::memcpy(bytes.data(), result, sizeof(result));
  float out[4] = {};
  ASSERT_TRUE(
      FromProto(response.outputs(), {{s.y, out, sizeof(out)}}).ok());
  EXPECT_EQ(std::memcmp(out, result, sizeof(out)), 0);
  EXPECT_EQ(response.outputs(0).id(), s.encoded.ids.at(s.y));
}

TEST(TensorDataCodecTest, OutputsOfTheWrongSizeAreDataLoss) {
  Sample s;
  v1::ExecuteResponse response;
  AppendOutput(0, 8, *response.mutable_outputs());
  float out[4] = {};
  EXPECT_EQ(FromProto(response.outputs(), {{s.y, out, sizeof(out)}}).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(FromProto(response.outputs(), {}).code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tessera::wire
