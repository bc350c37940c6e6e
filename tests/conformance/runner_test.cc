#include "tests/conformance/runner.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "backend/cpu/cpu_device.h"
#include "gmock/gmock.h"
#include "graph/ops.h"
#include "gtest/gtest.h"
#include "tests/conformance/cases.h"

namespace tessera::conformance {
namespace {

using ::testing::HasSubstr;

// A CPU device that claims not to support ARGSORT.
class NoArgsortDevice final : public Device {
 public:
  NoArgsortDevice() : cpu_(CpuDeviceOptions{}) {}
  const std::string& name() const override { return cpu_.name(); }
  DeviceProps Props() override { return cpu_.Props(); }
  BufferType& buffer_type() override { return cpu_.buffer_type(); }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return cpu_.CreateStream();
  }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return cpu_.CreateEvent();
  }
  bool SupportsOp(const Tensor& node) const override {
    return node.op != Op::kArgsort && cpu_.SupportsOp(node);
  }
  bool SupportsBufferType(const BufferType& type) const override {
    return cpu_.SupportsBufferType(type);
  }

 private:
  CpuDevice cpu_;
};

// A case whose first and second builds differ in an op parameter only, so
// that the device computes something other than the reference.
template <typename MakeOp>
OpCase AlternatingCase(std::string name, MakeOp make_op) {
  auto calls = std::make_shared<int>(0);
  OpCase c;
  c.name = std::move(name);
  c.build = [calls, make_op](Context& ctx) -> absl::StatusOr<Tensor*> {
    absl::StatusOr<Tensor*> a = ctx.NewTensor(Type::kF32, {33, 4});
    if (!a.ok()) return a.status();
    return make_op(ctx, *a, (*calls)++ % 2 == 0);
  };
  return c;
}

TEST(RunnerTest, PassesWhenDeviceMatchesReference) {
  CpuDevice cpu(CpuDeviceOptions{});
  OpCase c;
  c.name = "ADD f32 33x4 + 33";
  c.build = [](Context& ctx) -> absl::StatusOr<Tensor*> {
    absl::StatusOr<Tensor*> a = ctx.NewTensor(Type::kF32, {33, 4});
    absl::StatusOr<Tensor*> b = ctx.NewTensor(Type::kF32, {33});
    if (!a.ok() || !b.ok()) return absl::InternalError("NewTensor");
    return Add(ctx, *a, *b);
  };
  EXPECT_TRUE(RunCase(c, cpu, 1).ok());
}

TEST(RunnerTest, ReportsFloatMismatchAsInternal) {
  CpuDevice cpu(CpuDeviceOptions{});
  OpCase c =
      AlternatingCase("SCALE 1 or 2", [](Context& ctx, Tensor* a, bool first) {
        return Scale(ctx, a, first ? 1.0f : 2.0f);
      });
  const absl::Status s = RunCase(c, cpu, 1);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("SCALE 1 or 2"));
  EXPECT_THAT(s.message(), HasSubstr("NMSE"));
}

TEST(RunnerTest, ReportsIntegerMismatchAsInternal) {
  CpuDevice cpu(CpuDeviceOptions{});
  OpCase c = AlternatingCase(
      "ARGSORT asc or desc", [](Context& ctx, Tensor* a, bool first) {
        return Argsort(ctx, a,
                       first ? SortOrder::kAscending : SortOrder::kDescending);
      });
  const absl::Status s = RunCase(c, cpu, 1);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("element"));
}

TEST(RunnerTest, SkipsOpsTheDeviceDoesNotSupport) {
  NoArgsortDevice device;
  OpCase c = AlternatingCase("ARGSORT", [](Context& ctx, Tensor* a, bool) {
    return Argsort(ctx, a, SortOrder::kAscending);
  });
  EXPECT_TRUE(absl::IsUnimplemented(RunCase(c, device, 1)));
}

TEST(RunnerTest, RejectsCaseThatDoesNotBuild) {
  CpuDevice cpu(CpuDeviceOptions{});
  OpCase c = AlternatingCase("bad ADD", [](Context& ctx, Tensor* a, bool) {
    absl::StatusOr<Tensor*> b = ctx.NewTensor(Type::kF32, {5});
    if (!b.ok()) return b;
    return Add(ctx, a, *b);  // 33 is not a multiple of 5
  });
  const absl::Status s = RunCase(c, cpu, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("does not build"));
}

TEST(RunnerTest, NmseIsRelativeSquaredError) {
  EXPECT_DOUBLE_EQ(Nmse({1.0, 2.0}, {1.0, 1.0}), 0.5);
  // All-zero expectation: the plain sum of squared errors.
  EXPECT_DOUBLE_EQ(Nmse({0.5, 0.0}, {0.0, 0.0}), 0.25);
  EXPECT_DOUBLE_EQ(Nmse({}, {}), 0.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isinf(Nmse({nan}, {1.0})));
  EXPECT_TRUE(std::isinf(Nmse({1.0}, {1.0, 2.0})));
}

TEST(RunnerTest, SanitizedNameKeepsLettersAndDigits) {
  EXPECT_EQ(SanitizedName("ADD f16 10x5x4x3 + f32 10x1 perm"),
            "ADD_f16_10x5x4x3_f32_10x1_perm");
  EXPECT_EQ(SanitizedName(" [a]--b "), "a_b");
}

}  // namespace
}  // namespace tessera::conformance
