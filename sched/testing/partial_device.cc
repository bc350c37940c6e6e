#include "sched/testing/partial_device.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backend/event.h"
#include "backend/stream.h"
#include "graph/graph.h"

namespace tessera {

// Forwards to a stream of the wrapped device; see PartialDevice.
class PartialStream final : public Stream {
 public:
  PartialStream(PartialDevice& device, std::unique_ptr<Stream> inner)
      : device_(device), inner_(std::move(inner)) {}

  Device& device() override { return device_; }

  absl::Status SetTensorAsync(Tensor& t, const void* data, size_t offset,
                              size_t size) override {
    return Finish(inner_->SetTensorAsync(t, data, offset, size));
  }
  absl::Status GetTensorAsync(const Tensor& t, void* data, size_t offset,
                              size_t size) override {
    return Finish(inner_->GetTensorAsync(t, data, offset, size));
  }
  absl::Status CopyTensorAsync(const Tensor& src, Tensor& dst) override {
    if (!device_.options_.copies) {
      return absl::UnimplementedError(
          absl::StrCat("[PartialStream::CopyTensorAsync] device '",
                       device_.name(), "' does not copy between devices"));
    }
    return Finish(inner_->CopyTensorAsync(src, dst));
  }
  absl::Status ComputeAsync(const Graph& graph) override {
    int64_t work = 0;
    for (const Tensor* node : graph.nodes()) {
      if (!device_.SupportsOp(*node)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "[PartialStream::ComputeAsync] device '", device_.name(),
            "' does not compute node '", node->name, "' (",
            std::string(OpName(node->op)), ")"));
      }
      if (node->op != Op::kNone && !IsViewOp(node->op)) ++work;
    }
    device_.nodes_computed_ += work;
    return Finish(inner_->ComputeAsync(graph));
  }
  absl::Status Synchronize() override { return inner_->Synchronize(); }
  absl::Status RecordEvent(Event& event) override {
    return Finish(inner_->RecordEvent(event));
  }
  absl::Status WaitEvent(Event& event) override {
    return Finish(inner_->WaitEvent(event));
  }

 private:
  // Without async streams a call returns once its work is done.
  absl::Status Finish(absl::Status queued) {
    if (!queued.ok() || device_.options_.async_events) return queued;
    return inner_->Synchronize();
  }

  PartialDevice& device_;
  std::unique_ptr<Stream> inner_;
};

PartialDevice::PartialDevice(Device& inner, PartialDeviceOptions options)
    : inner_(inner), options_(std::move(options)) {}

DeviceProps PartialDevice::Props() {
  DeviceProps props = inner_.Props();
  props.name = options_.name;
  props.description = absl::StrCat("some ops of ", inner_.name());
  props.type = options_.type;
  if (!options_.async_events) {
    props.caps.async = false;
    props.caps.events = false;
  }
  return props;
}

absl::StatusOr<std::unique_ptr<Stream>> PartialDevice::CreateStream() {
  absl::StatusOr<std::unique_ptr<Stream>> inner = inner_.CreateStream();
  if (!inner.ok()) return inner.status();
  return std::make_unique<PartialStream>(*this, *std::move(inner));
}

absl::StatusOr<std::unique_ptr<Event>> PartialDevice::CreateEvent() {
  if (!options_.async_events) {
    return absl::UnimplementedError(absl::StrCat(
        "[PartialDevice::CreateEvent] device '", name(), "' has no events"));
  }
  return inner_.CreateEvent();
}

bool PartialDevice::SupportsOp(const Tensor& node) const {
  if (node.op == Op::kNone || IsViewOp(node.op)) return true;
  return options_.ops.contains(node.op) && inner_.SupportsOp(node);
}

}  // namespace tessera
