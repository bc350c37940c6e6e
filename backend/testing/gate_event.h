#ifndef TESSERA_BACKEND_TESTING_GATE_EVENT_H_
#define TESSERA_BACKEND_TESTING_GATE_EVENT_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "backend/device.h"
#include "backend/event.h"

namespace tessera::testing {

// An event of a foreign kind for tests: each recording completes, with the
// status given at construction, when the test opens it. Created with one
// recording pending; Record() starts another, as a stream recording the
// event again would. Thread-safe.
class GateEvent final : public Event {
 public:
  explicit GateEvent(Device& device, absl::Status result = absl::OkStatus());

  Device& device() override { return device_; }
  // Waits for the latest recording.
  absl::Status Synchronize() override;
  bool IsDone() override;
  std::unique_ptr<EventMark> Capture() override;

  // Starts a new recording; returns its index (0 is the first).
  int Record();
  // Completes the latest recording, or recording `index`.
  void Open();
  void Open(int index);

 private:
  struct Gate {
    absl::Notification open;
  };
  class Mark;
  std::shared_ptr<Gate> Latest();

  Device& device_;
  const absl::Status result_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Gate>> gates_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::testing

#endif  // TESSERA_BACKEND_TESTING_GATE_EVENT_H_
