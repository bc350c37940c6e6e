// Pipeline parallelism, checked by structure: with n_copies > 1, micro-batch
// k+1's first stage starts before micro-batch k's last stage ends. Stage
// spans are observed through events on each stream (sched/testing/
// timeline_stream.h), so the check has no timing threshold.

#include <vector>

#include "backend/assembly/device_spec.h"
#include "gtest/gtest.h"
#include "sched/testing/timeline_stream.h"
#include "sched/testing/two_stages.h"

namespace tessera {
namespace {

using testing::ExpectPipelinedOverlap;
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

  ExpectPipelinedOverlap(model, timeline, {s0->get(), s1->get()});
}

}  // namespace
}  // namespace tessera
