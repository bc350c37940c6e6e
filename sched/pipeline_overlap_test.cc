// Pipeline parallelism, checked by structure: with n_copies > 1, micro-batch
// k+1's first stage starts before micro-batch k's last stage ends. Stage
// spans are observed through events on each stream (sched/testing/
// timeline_stream.h), so the check has no timing threshold.

#include <cstring>
#include <vector>

#include "backend/assembly/device_spec.h"
#include "gtest/gtest.h"
#include "sched/testing/timeline_stream.h"
#include "sched/testing/two_stages.h"

namespace tessera {
namespace {

using testing::kBatches;
using testing::Overlaps;
using testing::TwoStages;

TEST(PipelineOverlapTest, NextMicroBatchStartsBeforeThePreviousEnds) {
  Registry registry;
  ASSERT_TRUE(AddDevices("cpu:2", 1, registry).ok());
  TwoStages model({registry.devices()[0], registry.devices()[1]});
  ASSERT_TRUE(model.UploadWeights().ok());
  Timeline timeline;
  auto s0 = TimelineStream::Create(
      *registry.devices()[0]->CreateStream(), timeline);
  auto s1 = TimelineStream::Create(
      *registry.devices()[1]->CreateStream(), timeline);
  ASSERT_TRUE(s0.ok() && s1.ok());

  // One graph in flight: the stages take turns, never overlapping.
  absl::StatusOr<std::vector<std::vector<float>>> serial =
      model.Run({s0->get(), s1->get()}, 1);
  ASSERT_TRUE(serial.ok()) << serial.status();
  EXPECT_EQ(Overlaps(timeline, 0, 1, 0), 0);

  // Four in flight: micro-batch k+1 enters stage 0 while k is in stage 1.
  absl::StatusOr<std::vector<std::vector<float>>> pipelined =
      model.Run({s0->get(), s1->get()}, 4);
  ASSERT_TRUE(pipelined.ok()) << pipelined.status();
  ASSERT_EQ(timeline.Started(0), 2 * kBatches);
  ASSERT_EQ(timeline.Started(1), 2 * kBatches);
  // A late observation can hide an overlap (never invent one), so on a
  // loaded machine a few may be missed; most must be seen.
  EXPECT_GE(Overlaps(timeline, 0, 1, kBatches), (kBatches - 1) / 2);
  for (int k = 0; k < kBatches; ++k) {
    EXPECT_EQ(std::memcmp((*serial)[k].data(), (*pipelined)[k].data(),
                          (*serial)[k].size() * sizeof(float)),
              0)
        << "micro-batch " << k;
  }
}

}  // namespace
}  // namespace tessera
