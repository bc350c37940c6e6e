#include "client/remote_device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "backend/ticket_event.h"
#include "base/status_macros.h"
#include "client/remote_stream.h"
#include "graph/ops.h"

namespace tessera::client {

RemoteDevice::RemoteDevice(Client& client, wire::DeviceDescription info)
    : client_(client),
      remote_name_(info.props.name),
      name_(absl::StrCat("remote:", info.props.name)),
      remote_type_(info.props.type),
      n_members_(info.props.type == DeviceType::kMeta
                     ? static_cast<int>(info.props.members.size())
                     : 0),
      buffer_type_(*this, client, info),
      info_(std::move(info)) {}

absl::StatusOr<std::vector<std::unique_ptr<RemoteDevice>>>
RemoteDevice::ListAll(Client& client) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<v1::DeviceInfo> infos,
                           client.ListDevices());
  std::vector<std::unique_ptr<RemoteDevice>> devices;
  for (const v1::DeviceInfo& info : infos) {
    TESSERA_ASSIGN_OR_RETURN(wire::DeviceDescription device,
                             wire::FromProto(info));
    devices.push_back(
        std::make_unique<RemoteDevice>(client, std::move(device)));
  }
  return devices;
}

DeviceProps RemoteDevice::Props() {
  absl::StatusOr<std::vector<v1::DeviceInfo>> infos = client_.ListDevices();
  absl::MutexLock lock(&mu_);
  if (infos.ok()) {
    for (const v1::DeviceInfo& info : *infos) {
      if (info.name() != remote_name_) continue;
      if (absl::StatusOr<wire::DeviceDescription> device =
              wire::FromProto(info);
          device.ok()) {
        info_ = *std::move(device);
      }
    }
  }
  DeviceProps props = info_.props;
  props.name = name_;
  props.description =
      absl::StrCat(info_.props.description, " on ", client_.server_version());
  props.type = DeviceType::kRemote;
  props.caps.host_buffer = false;
  props.caps.buffer_from_host_ptr = false;
  return props;
}

absl::StatusOr<std::unique_ptr<Stream>> RemoteDevice::CreateStream() {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RemoteStream> stream,
                           RemoteStream::Create(*this));
  return stream;
}

absl::StatusOr<std::unique_ptr<Event>> RemoteDevice::CreateEvent() {
  return std::make_unique<TicketEvent>(*this);
}

absl::Status RemoteDevice::SetSplitPolicy(SplitPolicy policy) {
  if (!is_meta()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[RemoteDevice] ", name_, " is not a meta device: no split policy"));
  }
  absl::MutexLock lock(&mu_);
  policy_ = std::move(policy);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SplitState>> RemoteDevice::SplitOf(
    const Tensor& t, const Buffer& buffer) {
  if (buffer.usage() == BufferUsage::kCompute) return std::nullopt;
  return PolicySplit(t);
}

absl::StatusOr<std::optional<SplitState>> RemoteDevice::PolicySplit(
    const Tensor& t) {
  SplitPolicy policy;
  {
    absl::MutexLock lock(&mu_);
    policy = policy_;
  }
  if (!policy) return std::nullopt;
  SplitState state = policy(t);
  absl::Status valid = ValidateSplit(state, t, n_members_);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", name_, "] split policy: ", valid.message()));
  }
  return state;
}

bool RemoteDevice::SupportsOp(const Tensor& node) const {
  return ValidateNode(node).ok();
}

bool RemoteDevice::SupportsBufferType(const BufferType& type) const {
  return &type == &buffer_type_;
}

}  // namespace tessera::client
