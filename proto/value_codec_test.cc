#include "proto/value_codec.h"

#include "gtest/gtest.h"

namespace tessera::wire {
namespace {

TEST(ValueCodecTest, BufferUsageRoundTrip) {
  for (BufferUsage usage :
       {BufferUsage::kAny, BufferUsage::kWeights, BufferUsage::kCompute}) {
    EXPECT_EQ(FromProto(ToProto(usage)).value(), usage);
  }
  absl::StatusOr<BufferUsage> bad = FromProto(static_cast<v1::BufferUsage>(7));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "usage: unknown value 7");
}

TEST(ValueCodecTest, ContentHashRoundTrip) {
  const ContentHash hash{.high = 0x0123456789abcdef, .low = 42};
  EXPECT_EQ(FromProto(ToProto(hash)), hash);
}

TEST(ValueCodecTest, ExecuteStatusRoundTrip) {
  v1::ExecuteResponse response;
  EXPECT_TRUE(GetStatus(response).ok());
  const absl::Status status = absl::ResourceExhaustedError("no memory");
  SetStatus(status, response);
  EXPECT_EQ(GetStatus(response), status);
  SetStatus(absl::OkStatus(), response);
  EXPECT_TRUE(GetStatus(response).ok());
}

}  // namespace
}  // namespace tessera::wire
