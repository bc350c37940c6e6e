#include "backend/testing/gate_event.h"

#include <utility>

namespace tessera::testing {

class GateEvent::Mark final : public EventMark {
 public:
  Mark(std::shared_ptr<Gate> gate, absl::Status result)
      : gate_(std::move(gate)), result_(std::move(result)) {}
  absl::Status Wait() override {
    gate_->open.WaitForNotification();
    return result_;
  }
  bool IsDone() override { return gate_->open.HasBeenNotified(); }

 private:
  const std::shared_ptr<Gate> gate_;
  const absl::Status result_;
};

GateEvent::GateEvent(Device& device, absl::Status result)
    : device_(device), result_(std::move(result)) {
  Record();
}

absl::Status GateEvent::Synchronize() { return Mark(Latest(), result_).Wait(); }

bool GateEvent::IsDone() { return Latest()->open.HasBeenNotified(); }

std::unique_ptr<EventMark> GateEvent::Capture() {
  return std::make_unique<Mark>(Latest(), result_);
}

int GateEvent::Record() {
  absl::MutexLock lock(&mu_);
  gates_.push_back(std::make_shared<Gate>());
  return static_cast<int>(gates_.size()) - 1;
}

void GateEvent::Open() { Latest()->open.Notify(); }

void GateEvent::Open(int index) {
  std::shared_ptr<Gate> gate;
  {
    absl::MutexLock lock(&mu_);
    gate = gates_.at(index);
  }
  if (!gate->open.HasBeenNotified()) gate->open.Notify();
}

std::shared_ptr<GateEvent::Gate> GateEvent::Latest() {
  absl::MutexLock lock(&mu_);
  return gates_.back();
}

}  // namespace tessera::testing
