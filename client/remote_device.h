#ifndef TESSERA_CLIENT_REMOTE_DEVICE_H_
#define TESSERA_CLIENT_REMOTE_DEVICE_H_

// A device of a daemon as an ordinary Device of the device API: buffers,
// streams and events live on the daemon, named by handles. Streams are
// asynchronous (a worker thread per stream sends the RPCs in order) and
// events are supported, so a local Scheduler pipelines over remote devices
// as over local ones:
//
//   auto client = Client::Connect(target).value();
//   auto devices = RemoteDevice::ListAll(*client).value();  // "remote:cpu0"..
//   auto stream = devices[0]->CreateStream().value();
//   auto sched = Scheduler::Create({stream.get(), cpu_stream}, {}, {}).value();

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/device.h"
#include "backend/meta/meta_device.h"
#include "backend/meta/split_state.h"
#include "client/client.h"
#include "client/remote_buffer.h"
#include "proto/device_codec.h"

namespace tessera::client {

class RemoteDevice final : public Device {
 public:
  // `client` must outlive the device and everything made from it. `info`
  // is the daemon's device as ListDevices describes it.
  RemoteDevice(Client& client, wire::DeviceDescription info);

  // One RemoteDevice per device of the daemon, in the daemon's order.
  // Errors: the daemon's ListDevices status; INVALID_ARGUMENT for a device
  // the wire codec does not accept (proto/device_codec.h).
  static absl::StatusOr<std::vector<std::unique_ptr<RemoteDevice>>> ListAll(
      Client& client);

  // "remote:" + the daemon's device name.
  const std::string& name() const override { return name_; }
  // The daemon's properties as the wire codec decodes them, memory as the
  // daemon reports it now (the last known on errors), with what a remote
  // device is: type kRemote, the "remote:" name, the server's version in
  // the description; async and events as the daemon's device has them
  // (RemoteStream queues, TicketEvent records); no host buffer and no
  // wrapping of host memory.
  DeviceProps Props() override;
  BufferType& buffer_type() override { return buffer_type_; }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  // Every op the graph IR validates: the daemon's CPU fallback computes
  // what its device lacks.
  bool SupportsOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType& type) const override;

  Client& client() const { return client_; }
  const std::string& remote_name() const { return remote_name_; }

  // Whether the daemon's device is a tensor-parallel meta device (its
  // members are Props().members).
  bool is_meta() const { return n_members_ > 0; }
  // The device's type on the daemon (Props().type is kRemote).
  DeviceType remote_type() const { return remote_type_; }
  // For a meta device: gives the split state of each tensor written whole
  // to this device's buffers (outside compute usage), sent with the write
  // so that the daemon scatters it over the members, and with graphs that
  // read the tensor. backend/meta/llama_policy.h has ready-made policies;
  // an empty one removes the policy. Call before writing tensors. Errors:
  // FAILED_PRECONDITION for a device that is not a meta device.
  absl::Status SetSplitPolicy(SplitPolicy policy);
  // The split state the policy gives `t` in `buffer` (one of this device's
  // buffers), checked against its shape and the member count; nullopt
  // without a policy or in a compute buffer.
  // Errors: INVALID_ARGUMENT for a state that does not fit `t`.
  absl::StatusOr<std::optional<SplitState>> SplitOf(const Tensor& t,
                                                    const Buffer& buffer);
  // The same for a tensor of no buffer yet (weights being placed).
  absl::StatusOr<std::optional<SplitState>> PolicySplit(const Tensor& t);

 private:
  // Constant after construction.
  Client& client_;
  const std::string remote_name_;
  const std::string name_;
  const DeviceType remote_type_;
  // Members of a meta device (0: not one).
  const int n_members_;
  RemoteBufferType buffer_type_;

  // The daemon's last description of the device, refreshed by Props().
  absl::Mutex mu_;
  wire::DeviceDescription info_ ABSL_GUARDED_BY(mu_);
  SplitPolicy policy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_REMOTE_DEVICE_H_
