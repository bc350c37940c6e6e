#include "backend/cuda/foreign_waits.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "backend/cpu/cpu_device.h"
#include "backend/testing/gate_event.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using cuda_kernels::KernelError;
using testing::GateEvent;

uint64_t Load(const uint64_t& flag) {
  return std::atomic_ref<const uint64_t>(flag).load(std::memory_order_acquire);
}

// Whether `flag` reaches `target` within a few seconds.
bool Reaches(const uint64_t& flag, uint64_t target) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Load(flag) < target) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Microseconds(100));
  }
  return true;
}

class ForeignWaitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ForeignWaits>> waits =
        ForeignWaits::Create("gpu0");
    ASSERT_TRUE(waits.ok()) << waits.status();
    waits_ = *std::move(waits);
    std::memset(&record_, 0, sizeof(record_));
  }

  CpuDevice cpu_{CpuDeviceOptions{.name = "cpu0", .n_threads = 1}};
  std::unique_ptr<ForeignWaits> waits_;
  uint64_t flag_ = 0;
  KernelError record_;
};

TEST_F(ForeignWaitsTest, ReleasesAStreamsWaitsInOrder) {
  GateEvent first(cpu_);
  GateEvent second(cpu_);
  waits_->Add(this, &flag_, 1, first.Capture(), &record_, "");
  waits_->Add(this, &flag_, 2, second.Capture(), &record_, "");
  // The second completes first: the stream still waits for the first.
  second.Open();
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(Load(flag_), 0u);
  first.Open();
  EXPECT_TRUE(Reaches(flag_, 2));
  EXPECT_EQ(record_.code, cuda_kernels::kKernelOk);
}

TEST_F(ForeignWaitsTest, StreamsDoNotWaitForEachOther) {
  GateEvent never(cpu_);
  GateEvent soon(cpu_);
  uint64_t other_flag = 0;
  KernelError other_record{};
  waits_->Add(this, &flag_, 1, never.Capture(), &record_, "");
  waits_->Add(&other_flag, &other_flag, 1, soon.Capture(), &other_record, "");
  soon.Open();
  EXPECT_TRUE(Reaches(other_flag, 1));
  EXPECT_EQ(Load(flag_), 0u);
  never.Open();
  EXPECT_TRUE(Reaches(flag_, 1));
}

TEST_F(ForeignWaitsTest, WaitsForTheRecordingCapturedNotALaterOne) {
  GateEvent event(cpu_);
  waits_->Add(this, &flag_, 1, event.Capture(), &record_, "");
  event.Record();  // recorded again before the first completes
  event.Open(0);
  EXPECT_TRUE(Reaches(flag_, 1));
  event.Open(1);
}

TEST_F(ForeignWaitsTest, AFailedEventGoesIntoTheRecord) {
  GateEvent event(cpu_, absl::DataLossError("the remote stream broke"));
  waits_->Add(this, &flag_, 1, event.Capture(), &record_,
              "waiting for an event of remote:cpu0: ");
  event.Open();
  ASSERT_TRUE(Reaches(flag_, 1));
  EXPECT_EQ(record_.code, cuda_kernels::kKernelForeignEventFailed);
  EXPECT_EQ(record_.value, static_cast<int64_t>(absl::StatusCode::kDataLoss));
  EXPECT_EQ(std::string(record_.message),
            "waiting for an event of remote:cpu0: the remote stream broke");
}

TEST_F(ForeignWaitsTest, AnEarlierErrorInTheRecordIsKept) {
  record_.code = cuda_kernels::kKernelRowIndexOutOfRange;
  GateEvent event(cpu_, absl::InternalError("later"));
  waits_->Add(this, &flag_, 1, event.Capture(), &record_, "");
  event.Open();
  ASSERT_TRUE(Reaches(flag_, 1));
  EXPECT_EQ(record_.code, cuda_kernels::kKernelRowIndexOutOfRange);
}

TEST_F(ForeignWaitsTest, CancelReleasesAtOnceAsCancelled) {
  GateEvent never(cpu_);
  waits_->Add(this, &flag_, 1, never.Capture(), &record_, "");
  waits_->Add(this, &flag_, 2, never.Capture(), &record_, "");
  waits_->Cancel(this);
  EXPECT_EQ(Load(flag_), 2u);
  EXPECT_EQ(record_.code, cuda_kernels::kKernelForeignEventFailed);
  EXPECT_EQ(record_.value, static_cast<int64_t>(absl::StatusCode::kCancelled));
  never.Open();
}

TEST_F(ForeignWaitsTest, DestructionReleasesWhatIsPending) {
  GateEvent never(cpu_);
  waits_->Add(this, &flag_, 7, never.Capture(), &record_, "");
  waits_.reset();
  EXPECT_EQ(Load(flag_), 7u);
  EXPECT_EQ(record_.value, static_cast<int64_t>(absl::StatusCode::kCancelled));
  never.Open();
}

}  // namespace
}  // namespace tessera
