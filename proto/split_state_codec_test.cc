#include "proto/split_state_codec.h"

#include "gtest/gtest.h"

namespace tessera::wire {
namespace {

TEST(SplitStateCodecTest, StatesRoundTrip) {
  const SplitState states[] = {
      SplitState::Mirrored(),
      SplitState::Partial(),
      SplitState::Even(1, 96, 2, 16).value(),
      SplitState::Even(0, 70, 4).value(),
      SplitState::Segmented(1, {64, 32, 32}, 2, 16).value(),
  };
  for (const SplitState& state : states) {
    SCOPED_TRACE(state.ToString());
    absl::StatusOr<SplitState> back = FromProto(ToProto(state));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, state);
  }
}

TEST(SplitStateCodecTest, LayoutRoundTrips) {
  const TensorLayout layout{.type = Type::kQ8_0,
                            .ne = {64, 8, 2},
                            .split = SplitState::Even(0, 64, 2, 32).value()};
  absl::StatusOr<TensorLayout> back = FromProto(ToProto(layout));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->type, layout.type);
  EXPECT_EQ(back->ne, layout.ne);
  EXPECT_EQ(back->split, layout.split);
}

v1::SplitStateDef Axis(uint32_t axis, uint32_t n_segments,
                       std::vector<int64_t> lengths) {
  v1::SplitStateDef def;
  def.set_kind(v1::SplitStateDef::AXIS);
  def.set_axis(axis);
  def.set_n_segments(n_segments);
  for (int64_t n : lengths) def.add_lengths(n);
  return def;
}

void ExpectInvalid(const v1::SplitStateDef& def, absl::string_view words) {
  absl::StatusOr<SplitState> got = FromProto(def);
  ASSERT_FALSE(got.ok()) << def.DebugString();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find(words), std::string::npos)
      << got.status();
}

TEST(SplitStateCodecTest, MalformedStatesAreInvalid) {
  ExpectInvalid(v1::SplitStateDef(), "unknown kind 0");
  ExpectInvalid(Axis(4, 1, {1, 1}), "axis 4 is not in 0..3");
  ExpectInvalid(Axis(0, 0, {1, 1}), "n_segments below 1");
  ExpectInvalid(Axis(0, 1, {}), "0 lengths");
  ExpectInvalid(Axis(0, 2, {1, 2, 3}), "3 lengths for 2 segments");
  ExpectInvalid(Axis(0, 1, std::vector<int64_t>(kMaxSplitLengths + 1, 1)),
                "lengths, want 1 to");
  v1::SplitStateDef mirrored;
  mirrored.set_kind(v1::SplitStateDef::MIRRORED);
  mirrored.add_lengths(4);
  ExpectInvalid(mirrored, "MIRRORED with an axis, segments or lengths");
  v1::SplitStateDef partial;
  partial.set_kind(v1::SplitStateDef::PARTIAL);
  partial.set_axis(1);
  ExpectInvalid(partial, "PARTIAL with an axis");
}

TEST(SplitStateCodecTest, MalformedLayoutsAreInvalid) {
  v1::TensorLayout layout = ToProto(
      TensorLayout{.type = Type::kF32, .ne = {4}, .split = SplitState()});
  layout.set_type(999);
  EXPECT_EQ(FromProto(layout).status().code(),
            absl::StatusCode::kInvalidArgument);
  layout.set_type(static_cast<int32_t>(Type::kF32));
  layout.clear_ne();
  EXPECT_NE(FromProto(layout).status().message().find("0 dimensions"),
            std::string::npos);
  layout.add_ne(-1);
  EXPECT_NE(FromProto(layout).status().message().find("extent -1"),
            std::string::npos);
  layout.set_ne(0, 4);
  layout.mutable_split()->set_kind(v1::SplitStateDef::AXIS);
  EXPECT_NE(FromProto(layout).status().message().find("layout: split:"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::wire
