#ifndef TESSERA_BACKEND_EVENT_H_
#define TESSERA_BACKEND_EVENT_H_

#include "absl/status/status.h"

namespace tessera {

class Device;

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
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_EVENT_H_
