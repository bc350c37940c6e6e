#ifndef TESSERA_SCHED_TESTING_TWO_STAGES_H_
#define TESSERA_SCHED_TESTING_TWO_STAGES_H_

// A two-stage pipeline for tests of pipeline parallelism: stage s's
// MUL_MATs have their weights on device s, so the scheduler cuts one split
// per stage; and the count of overlaps a Timeline saw between them.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/device.h"
#include "base/status_macros.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "gtest/gtest.h"
#include "sched/scheduler.h"
#include "sched/testing/models.h"
#include "sched/testing/timeline_stream.h"

namespace tessera::testing {

constexpr int64_t kDim = 512;
constexpr int64_t kTokens = 256;
// Long enough (tens of milliseconds a stage) that the hand-offs between
// stages, and a watcher thread's late wake-up on a loaded machine, stay
// short against the compute they overlap: with 4, as few as 2 of the 7
// overlaps were seen in some runs.
constexpr int kLayersPerStage = 16;
constexpr int kBatches = 8;

// Two stages of MUL_MATs: stage s's weights on devices[s].
class TwoStages {
 public:
  explicit TwoStages(std::vector<Device*> devices)
      : first_({devices[0]}), second_({devices[1]}) {}

  absl::Status UploadWeights() {
    for (Weights* stage : {&first_, &second_}) {
      for (int l = 0; l < kLayersPerStage; ++l) {
        TESSERA_RETURN_IF_ERROR(
            stage->Add({kDim, kDim}, "w" + std::to_string(l)).status());
      }
      TESSERA_RETURN_IF_ERROR(stage->Upload());
    }
    return absl::OkStatus();
  }

  // Runs kBatches micro-batches with `n_copies` in flight; returns the
  // outputs.
  absl::StatusOr<std::vector<std::vector<float>>> Run(
      std::vector<Stream*> streams, int n_copies) {
    // A graph placed by one scheduler is not placed again by another:
    // build it anew.
    Context ctx;
    TESSERA_ASSIGN_OR_RETURN(Tensor * x,
                             ctx.NewTensor(Type::kF32, {kDim, kTokens}));
    x->name = "x";
    x->flags |= kFlagInput;
    Tensor* y = x;
    for (Weights* stage : {&first_, &second_}) {
      for (Tensor* w : stage->all()) {
        TESSERA_ASSIGN_OR_RETURN(y, MulMat(ctx, w, y));
      }
    }
    y->flags |= kFlagOutput;
    Graph graph;
    TESSERA_RETURN_IF_ERROR(graph.Expand(y));
    TESSERA_ASSIGN_OR_RETURN(
        std::unique_ptr<Scheduler> sched,
        Scheduler::Create(streams, {}, {.n_copies = n_copies}));
    TESSERA_RETURN_IF_ERROR(sched->AllocGraph(graph));
    if (sched->n_splits() != 2) {
      return absl::InternalError("expected one split per stage");
    }
    std::vector<std::vector<float>> outputs(
        kBatches, std::vector<float>(y->NumElements()));
    std::vector<float> input(x->NumElements());
    for (int k = 0; k < kBatches; ++k) {
      for (size_t i = 0; i < input.size(); ++i) {
        input[i] = Value(i, k, 1.0f);
      }
      TESSERA_RETURN_IF_ERROR(
          x->buffer->SetTensor(*x, input.data(), 0, x->NumBytes()));
      TESSERA_RETURN_IF_ERROR(sched->ComputeAsync(graph));
      TESSERA_RETURN_IF_ERROR(sched->GetTensorAsync(
          *y, outputs[k].data(), 0, y->NumBytes()));
    }
    TESSERA_RETURN_IF_ERROR(sched->Synchronize());
    return outputs;
  }

 private:
  Weights first_;
  Weights second_;
};

// Micro-batches k (of kBatches, computation `offset` + k on each stream)
// whose first stage (computation k+1 on stream `first`)
// started before the previous one's last stage (computation k on stream
// `last`) ended.
inline int Overlaps(Timeline& timeline, int first, int last, int offset) {
  int overlaps = 0;
  for (int k = 0; k + 1 < kBatches; ++k) {
    const int ended =
        timeline.EndedWhenStarted(first, offset + k + 1, last);
    EXPECT_GE(ended, 0) << "start of micro-batch " << k + 1 << " not observed";
    if (ended >= 0 && ended <= offset + k) ++overlaps;
  }
  return overlaps;
}

// Runs `model` over `streams` (the first two TimelineStreams of
// `timeline`, stage 1 then stage 2) with one graph in flight and with four,
// and checks that the stages never overlap with one, that micro-batch k+1
// enters stage 1 while k is in stage 2 with four for at least
// `min_overlaps` of them (a late observation can hide an overlap but never
// invent one, so on a loaded machine most, not all, must be seen) and that
// both give the same results bitwise.
inline void ExpectPipelinedOverlap(TwoStages& model, Timeline& timeline,
                                   const std::vector<Stream*>& streams,
                                   int min_overlaps = (kBatches - 1) / 2) {
  absl::StatusOr<std::vector<std::vector<float>>> serial =
      model.Run(streams, 1);
  ASSERT_TRUE(serial.ok()) << serial.status();
  EXPECT_EQ(Overlaps(timeline, 0, 1, 0), 0);
  absl::StatusOr<std::vector<std::vector<float>>> pipelined =
      model.Run(streams, 4);
  ASSERT_TRUE(pipelined.ok()) << pipelined.status();
  ASSERT_EQ(timeline.Started(0), 2 * kBatches);
  ASSERT_EQ(timeline.Started(1), 2 * kBatches);
  EXPECT_GE(Overlaps(timeline, 0, 1, kBatches), min_overlaps);
  for (int k = 0; k < kBatches; ++k) {
    EXPECT_EQ(std::memcmp((*serial)[k].data(), (*pipelined)[k].data(),
                          (*serial)[k].size() * sizeof(float)),
              0)
        << "micro-batch " << k;
  }
}

}  // namespace tessera::testing

#endif  // TESSERA_SCHED_TESTING_TWO_STAGES_H_
