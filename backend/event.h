#ifndef TESSERA_BACKEND_EVENT_H_
#define TESSERA_BACKEND_EVENT_H_

#include <memory>

#include "absl/status/status.h"

namespace tessera {

class Device;

// One recording of an event, captured by Event::Capture: recording the
// event again later does not move it. The event must outlive its marks.
// Thread-safe.
class EventMark {
 public:
  virtual ~EventMark() = default;
  // Blocks until the work before the captured marker is done. Returns the
  // first error of that work, else OK.
  virtual absl::Status Wait() = 0;
  // Whether that work is done (non-blocking).
  virtual bool IsDone() = 0;
};

// A marker in a stream's queue (ggml_backend_event). Recorded with
// Stream::RecordEvent, waited for by another stream with Stream::WaitEvent
// or by the host with Synchronize. An event that was never recorded is
// complete. Recording again replaces the previous marker. Thread-safe.
class Event {
 public:
  virtual ~Event() = default;
  virtual Device& device() = 0;
  // Blocks until the work queued before the marker is done. Returns the
  // first error of that work (the stream's sticky error), else OK.
  virtual absl::Status Synchronize() = 0;
  // Whether that work is done (non-blocking).
  virtual bool IsDone() = 0;
  // The latest recording as of now. A wait queued now must wait for this
  // recording, not a later one: a pipelined schedule records its events
  // again while earlier waits are still queued, and would otherwise wait
  // for its own future. An event never recorded gives a mark that is done.
  virtual std::unique_ptr<EventMark> Capture() = 0;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_EVENT_H_
