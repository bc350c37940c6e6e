#ifndef TESSERA_BACKEND_TICKET_EVENT_H_
#define TESSERA_BACKEND_TICKET_EVENT_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "backend/event.h"

namespace tessera {

class Device;

// An event of a device whose streams run a worker queue (CPU and remote
// devices, backend/task_queue.h). Each recording gets a ticket (1, 2, ...); the
// recording stream completes the ticket, with its sticky status, when its
// worker reaches the marker. A wait for ticket t returns once a ticket >= t
// is complete: recording again replaces the previous marker. Thread-safe.
class TicketEvent final : public Event {
 public:
  explicit TicketEvent(Device& device);

  Device& device() override;
  // Waits for the latest recording (OK at once if never recorded).
  absl::Status Synchronize() override;
  bool IsDone() override;
  // A mark of ticket last_recorded(): a wait for it (WaitFor).
  std::unique_ptr<EventMark> Capture() override;

  // Starts a recording; returns its ticket (called when a stream queues
  // the marker).
  uint64_t Record();
  // The ticket of the latest recording, 0 if none.
  uint64_t last_recorded();
  // Marks `ticket` complete with the recording stream's status (called by
  // that stream's worker on reaching the marker).
  void Complete(uint64_t ticket, absl::Status status);
  // Blocks until a ticket >= `ticket` is complete (polling briefly first,
  // backend/spin.h); returns its status.
  absl::Status WaitFor(uint64_t ticket);
  // Whether a ticket >= `ticket` is complete.
  bool IsComplete(uint64_t ticket);

 private:
  Device& device_;
  absl::Mutex mu_;
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  // Written under mu_ (with status_); read without it by IsComplete, which
  // waiting streams poll (TaskQueue::EnqueueWait).
  std::atomic<uint64_t> completed_ = 0;
  // Status of ticket completed_.
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_TICKET_EVENT_H_
