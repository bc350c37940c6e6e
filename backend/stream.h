#ifndef TESSERA_BACKEND_STREAM_H_
#define TESSERA_BACKEND_STREAM_H_

#include <cstddef>

#include "absl/status/status.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace tessera {

class Device;
class Event;

// An ordered queue of work on one device (ggml_backend). Calls return once
// the work is queued; it then runs in order. Arguments are checked when
// queued (INVALID_ARGUMENT at once); failures while running (a kernel's
// error, a device error) make the stream's status sticky: Synchronize and
// every event recorded afterwards return it, and later work is skipped.
// Pointers, tensors and graphs passed in must stay valid until the work is
// done. One thread at a time may queue work on a stream.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device& device() = 0;

  // Host <-> tensor copies of `size` bytes at `offset` into `t`'s data.
  virtual absl::Status SetTensorAsync(Tensor& t, const void* data,
                                      size_t offset, size_t size) = 0;
  virtual absl::Status GetTensorAsync(const Tensor& t, void* data,
                                      size_t offset, size_t size) = 0;
  // Copies `src` into `dst` (same byte size). `dst` is on this stream's
  // device; `src` may be on any device whose memory this one can reach.
  // Errors: UNIMPLEMENTED when it cannot reach `src` (the caller stages the
  // copy through host memory instead).
  virtual absl::Status CopyTensorAsync(const Tensor& src, Tensor& dst) = 0;

  // Queues the computation of every node of `graph`, in order. All tensors
  // must be allocated in buffers this device can use.
  // Errors: INVALID_ARGUMENT for an unallocated tensor or an op the device
  // does not support.
  virtual absl::Status ComputeAsync(const Graph& graph) = 0;
  // ComputeAsync then Synchronize.
  absl::Status Compute(const Graph& graph);

  // Blocks until all queued work is done; returns the sticky status.
  virtual absl::Status Synchronize() = 0;

  // Marks the current end of this stream's queue in `event` (an event of
  // this stream's device).
  virtual absl::Status RecordEvent(Event& event) = 0;
  // Work queued on this stream after this call waits for `event`, which may
  // belong to any device. A failed event makes this stream fail too.
  virtual absl::Status WaitEvent(Event& event) = 0;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_STREAM_H_
