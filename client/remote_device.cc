#include "client/remote_device.h"

#include "absl/strings/str_cat.h"
#include "backend/ticket_event.h"
#include "client/remote_stream.h"
#include "graph/ops.h"
#include "base/status_macros.h"

namespace tessera::client {

RemoteDevice::RemoteDevice(Client& client, const v1::DeviceInfo& info)
    : client_(client),
      info_(info),
      name_(absl::StrCat("remote:", info.name())),
      buffer_type_(*this, client, info) {}

absl::StatusOr<std::vector<std::unique_ptr<RemoteDevice>>>
RemoteDevice::ListAll(Client& client) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<v1::DeviceInfo> infos,
                           client.ListDevices());
  std::vector<std::unique_ptr<RemoteDevice>> devices;
  for (const v1::DeviceInfo& info : infos) {
    devices.push_back(std::make_unique<RemoteDevice>(client, info));
  }
  return devices;
}

DeviceProps RemoteDevice::Props() {
  if (absl::StatusOr<std::vector<v1::DeviceInfo>> infos = client_.ListDevices();
      infos.ok()) {
    for (const v1::DeviceInfo& info : *infos) {
      if (info.name() == info_.name()) info_ = info;
    }
  }
  DeviceProps props;
  props.name = name_;
  props.description = absl::StrCat(info_.description(), " on ",
                                   client_.server_version());
  props.type = DeviceType::kRemote;
  props.memory_free = info_.memory_free();
  props.memory_total = info_.memory_total();
  props.caps = {.async = true, .events = true};
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

bool RemoteDevice::SupportsOp(const Tensor& node) const {
  return ValidateNode(node).ok();
}

bool RemoteDevice::SupportsBufferType(const BufferType& type) const {
  return &type == &buffer_type_;
}

}  // namespace tessera::client
