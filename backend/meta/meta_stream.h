#ifndef TESSERA_BACKEND_META_META_STREAM_H_
#define TESSERA_BACKEND_META_META_STREAM_H_

#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "backend/device.h"
#include "backend/meta/meta_device.h"
#include "backend/meta/tp_plan.h"
#include "backend/stream.h"
#include "graph/graph.h"

namespace tessera {

// The stream of a MetaDevice: one stream per member, in rank order.
// ComputeAsync derives (once per graph, then cached) one graph per member
// and the collectives between them (backend/meta/tp_plan.h), then queues
// them: member graphs on member streams, collectives through the device's
// Communicator on the same streams. Transfers scatter and gather slices on
// the member streams. Events are MetaEvents. Contract: backend/stream.h;
// errors of a member surface from Synchronize and the events, naming the
// member. One thread at a time.
class MetaStream final : public Stream {
 public:
  MetaStream(MetaDevice& device, std::vector<std::unique_ptr<Stream>> members);
  // Waits for the member streams.
  ~MetaStream() override;

  Device& device() override { return device_; }
  absl::Status SetTensorAsync(Tensor& t, const void* data, size_t offset,
                              size_t size) override;
  absl::Status GetTensorAsync(const Tensor& t, void* data, size_t offset,
                              size_t size) override;
  // `src` in host memory is scattered; a whole `src` in another meta
  // device's memory is copied member to member where the member streams
  // can; else UNIMPLEMENTED.
  absl::Status CopyTensorAsync(const Tensor& src, Tensor& dst) override;
  // Errors: as Stream, plus DerivePlan's (UNIMPLEMENTED for an op or layout
  // without a rule).
  absl::Status ComputeAsync(const Graph& graph) override;
  absl::Status Synchronize() override;
  absl::Status RecordEvent(Event& event) override;
  absl::Status WaitEvent(Event& event) override;

  Stream& member(int i) { return *members_[i]; }
  // Plans derived so far (a graph computed again reuses its plan).
  int plans_derived() const { return plans_derived_; }
  // Collectives queued by the last ComputeAsync.
  int last_collectives() const { return last_collectives_; }

 private:
  absl::StatusOr<MetaBuffer*> MetaBufferOf(const Tensor& t,
                                           absl::string_view where);

  MetaDevice& device_;
  const std::vector<std::unique_ptr<Stream>> members_;
  std::vector<Stream*> member_ptrs_;
  absl::flat_hash_map<const Graph*, std::unique_ptr<TpPlan>> plans_;
  // Plans replaced while their work may be queued; freed on Synchronize.
  std::vector<std::unique_ptr<TpPlan>> retired_;
  // Partial-sum reads: per read, the member copies and the destination.
  struct PendingSum {
    std::vector<std::vector<float>> parts;
    float* dst;
  };
  std::vector<std::unique_ptr<PendingSum>> pending_sums_;
  // Zeros that member streams read for partial writes; freed on
  // Synchronize.
  std::vector<std::unique_ptr<std::vector<uint8_t>>> zeros_;
  int plans_derived_ = 0;
  int last_collectives_ = 0;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_META_META_STREAM_H_
