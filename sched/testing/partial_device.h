#ifndef TESSERA_SCHED_TESTING_PARTIAL_DEVICE_H_
#define TESSERA_SCHED_TESTING_PARTIAL_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "backend/device.h"

namespace tessera {

struct PartialDeviceOptions {
  std::string name = "partial0";
  // The type Props() reports (a GPU by default, as ggml's schedulers see
  // an accelerator in front of the CPU).
  DeviceType type = DeviceType::kGpu;
  // Ops it computes; NONE and the view ops are always supported.
  absl::flat_hash_set<Op> ops;
  // false: Props() reports no async streams and no events, CreateEvent is
  // UNIMPLEMENTED and every stream call returns once its work is done.
  bool async_events = true;
  // false: CopyTensorAsync is UNIMPLEMENTED.
  bool copies = true;
};

// A test device that wraps another device (whose memory, streams and events
// it uses) and computes only some ops: for testing a scheduler's fallback.
// Its streams report this device as theirs and reject a graph with a node
// it does not support (INVALID_ARGUMENT), so a wrong assignment fails the
// compute. Thread-safe.
class PartialDevice final : public Device {
 public:
  // `inner` must outlive this device.
  PartialDevice(Device& inner, PartialDeviceOptions options);

  const std::string& name() const override { return options_.name; }
  DeviceProps Props() override;
  BufferType& buffer_type() override { return inner_.buffer_type(); }
  BufferType* host_buffer_type() override { return inner_.host_buffer_type(); }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  bool SupportsOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType& type) const override {
    return inner_.SupportsBufferType(type);
  }

  const PartialDeviceOptions& options() const { return options_; }
  // Nodes that do work (not NONE or views) queued on its streams so far.
  int64_t nodes_computed() const { return nodes_computed_.load(); }

 private:
  friend class PartialStream;
  Device& inner_;
  const PartialDeviceOptions options_;
  std::atomic<int64_t> nodes_computed_{0};
};

}  // namespace tessera

#endif  // TESSERA_SCHED_TESTING_PARTIAL_DEVICE_H_
