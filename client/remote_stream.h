#ifndef TESSERA_CLIENT_REMOTE_STREAM_H_
#define TESSERA_CLIENT_REMOTE_STREAM_H_

#include <memory>

#include "absl/status/statusor.h"
#include "backend/stream.h"
#include "backend/task_queue.h"
#include "client/remote_device.h"

namespace tessera::client {

// A stream of a RemoteDevice: calls are checked and queued; a worker thread
// (running only while there is work, TaskQueue) sends them to the daemon in
// order (WriteTensor, ReadTensor, CopyTensor, Compute of the graph with every
// tensor in the session's buffers). Contract: backend/stream.h.
class RemoteStream final : public Stream {
 public:
  static absl::StatusOr<std::unique_ptr<RemoteStream>> Create(
      RemoteDevice& device);

  Device& device() override { return device_; }
  absl::Status SetTensorAsync(Tensor& t, const void* data, size_t offset,
                              size_t size) override;
  absl::Status GetTensorAsync(const Tensor& t, void* data, size_t offset,
                              size_t size) override;
  // Errors: UNIMPLEMENTED unless both tensors are in this client's remote
  // buffers.
  absl::Status CopyTensorAsync(const Tensor& src, Tensor& dst) override;
  // Encodes the graph now (INVALID_ARGUMENT for a tensor outside the
  // session's buffers) and sends it when the queue reaches it.
  absl::Status ComputeAsync(const Graph& graph) override;
  // Queues `request` (RunCollective, one rank's part of a collective of a
  // group spanning daemons): the daemon runs it after this stream's earlier
  // work, and the stream's later work waits for it.
  void CollectiveAsync(v1::RunCollectiveRequest request);
  absl::Status Synchronize() override { return queue_->Synchronize(); }
  absl::Status RecordEvent(Event& event) override;
  absl::Status WaitEvent(Event& event) override;

 private:
  RemoteStream(RemoteDevice& device, std::unique_ptr<TaskQueue> queue)
      : device_(device), queue_(std::move(queue)) {}
  // INVALID_ARGUMENT unless `t` is in a remote buffer of this device's
  // client and [offset, offset + size) lies inside it.
  absl::Status CheckRange(const Tensor& t, size_t offset, size_t size) const;

  RemoteDevice& device_;
  const std::unique_ptr<TaskQueue> queue_;
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_REMOTE_STREAM_H_
