#include "backend/meta/split_state.h"

#include <vector>

#include "graph/context.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

TEST(SplitStateTest, EvenSplitDivides) {
  SplitState s = SplitState::Even(0, 64, 4).value();
  EXPECT_EQ(s.lengths, (std::vector<int64_t>{16, 16, 16, 16}));
  std::vector<SlicePiece> p = s.Pieces(2);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].full_offset, 32);
  EXPECT_EQ(p[0].member_offset, 0);
  EXPECT_EQ(p[0].length, 16);
  EXPECT_EQ(s.n_members(), 4);
}

TEST(SplitStateTest, UnevenSplitGivesFirstMembersMore) {
  SplitState s = SplitState::Even(1, 10, 4).value();
  EXPECT_EQ(s.lengths, (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(s.Pieces(3)[0].full_offset, 8);
  EXPECT_EQ(s.MemberExtent(3), 2);
}

TEST(SplitStateTest, GranularityKeepsWholeUnits) {
  // 5 heads of 16 over 2 members: 3 heads and 2 heads.
  SplitState s = SplitState::Even(0, 80, 2, 16).value();
  EXPECT_EQ(s.lengths, (std::vector<int64_t>{48, 32}));
  // More members than units: the last gets nothing.
  SplitState t = SplitState::Even(0, 64, 3, 32).value();
  EXPECT_EQ(t.lengths, (std::vector<int64_t>{32, 32, 0}));
  EXPECT_TRUE(t.Pieces(2).empty());
}

TEST(SplitStateTest, SegmentsEachSplitAcrossMembers) {
  // A fused QKV output of 64 + 32 + 32 over 2 members.
  const int64_t segs[] = {64, 32, 32};
  SplitState s = SplitState::Segmented(1, segs, 2).value();
  EXPECT_EQ(s.n_segments, 3);
  EXPECT_EQ(s.lengths, (std::vector<int64_t>{32, 32, 16, 16, 16, 16}));
  std::vector<SlicePiece> p = s.Pieces(1);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].full_offset, 32);
  EXPECT_EQ(p[0].member_offset, 0);
  EXPECT_EQ(p[1].full_offset, 80);
  EXPECT_EQ(p[1].member_offset, 32);
  EXPECT_EQ(p[2].full_offset, 112);
  EXPECT_EQ(p[2].member_offset, 48);
  EXPECT_EQ(s.MemberExtent(1), 64);
  EXPECT_FALSE(s.SameSlices(SplitState::Even(1, 128, 2).value()));
  EXPECT_TRUE(s.SameSlices(s));
}

TEST(SplitStateTest, ValidateAcceptsFittingSplits) {
  Context ctx;
  Tensor* w = ctx.NewTensor(Type::kF32, {64, 96}).value();
  EXPECT_TRUE(ValidateSplit(SplitState::Even(1, 96, 2).value(), *w, 2).ok());
  EXPECT_TRUE(ValidateSplit(SplitState::Mirrored(), *w, 2).ok());
  EXPECT_TRUE(ValidateSplit(SplitState::Partial(), *w, 2).ok());
  int64_t ne[kMaxDims];
  MemberShape(*w, SplitState::Even(1, 96, 4).value(), 3, ne);
  EXPECT_EQ(ne[0], 64);
  EXPECT_EQ(ne[1], 24);
}

TEST(SplitStateTest, ValidateRejectsMisfits) {
  Context ctx;
  Tensor* w = ctx.NewTensor(Type::kF32, {64, 96}).value();
  // Wrong extent.
  EXPECT_EQ(ValidateSplit(SplitState::Even(1, 64, 2).value(), *w, 2).code(),
            kInvalid);
  // Wrong member count.
  EXPECT_EQ(ValidateSplit(SplitState::Even(1, 96, 2).value(), *w, 3).code(),
            kInvalid);
  // Segments that do not add up.
  SplitState bad = SplitState::Even(0, 64, 2).value();
  bad.n_segments = 2;
  EXPECT_EQ(ValidateSplit(bad, *w, 2).code(), kInvalid);
  // Negative lengths.
  SplitState neg{.axis = SplitAxis::kAxis0, .lengths = {80, -16}};
  EXPECT_EQ(ValidateSplit(neg, *w, 2).code(), kInvalid);
  // Lengths on a mirrored tensor.
  SplitState mirrored{.lengths = {64}};
  EXPECT_EQ(ValidateSplit(mirrored, *w, 1).code(), kInvalid);
  // Partial sums of integers.
  Tensor* ids = ctx.NewTensor(Type::kI32, {8}).value();
  EXPECT_EQ(ValidateSplit(SplitState::Partial(), *ids, 2).code(), kInvalid);
  // Builders refuse bad arguments.
  EXPECT_EQ(SplitState::Even(4, 64, 2).status().code(), kInvalid);
  EXPECT_EQ(SplitState::Even(0, 60, 2, 16).status().code(), kInvalid);
  EXPECT_EQ(SplitState::Even(0, 64, 0).status().code(), kInvalid);
}

TEST(SplitStateTest, QuantizedSplitsOnWholeBlocks) {
  Context ctx;
  Tensor* w = ctx.NewTensor(Type::kQ8_0, {128, 4}).value();
  EXPECT_TRUE(
      ValidateSplit(SplitState::Even(0, 128, 2, 32).value(), *w, 2).ok());
  EXPECT_TRUE(
      ValidateSplit(SplitState::Even(0, 128, 3, 32).value(), *w, 3).ok());
  EXPECT_EQ(ValidateSplit(SplitState::Even(0, 128, 3).value(), *w, 3).code(),
            kInvalid);
}

}  // namespace
}  // namespace tessera
