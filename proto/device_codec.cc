#include "proto/device_codec.h"

#include "absl/strings/str_cat.h"

namespace tessera::wire {

BufferTypeDescription Describe(BufferType& type) {
  return {.name = std::string(type.name()),
          .alignment = type.alignment(),
          .max_size = type.max_size(),
          .is_host = type.is_host()};
}

DeviceDescription Describe(Device& device) {
  DeviceDescription out{.props = device.Props()};
  out.buffer_types.push_back(Describe(device.buffer_type()));
  if (BufferType* host = device.host_buffer_type(); host != nullptr) {
    out.buffer_types.push_back(Describe(*host));
  }
  return out;
}

v1::DeviceInfo::Type ToProto(DeviceType type) {
  switch (type) {
    case DeviceType::kCpu:
      return v1::DeviceInfo::CPU;
    case DeviceType::kGpu:
      return v1::DeviceInfo::GPU;
    case DeviceType::kRemote:
      return v1::DeviceInfo::REMOTE;
    case DeviceType::kMeta:
      return v1::DeviceInfo::META;
  }
  return v1::DeviceInfo::TYPE_UNSPECIFIED;
}

absl::StatusOr<DeviceType> FromProto(v1::DeviceInfo::Type type) {
  switch (type) {
    case v1::DeviceInfo::CPU:
      return DeviceType::kCpu;
    case v1::DeviceInfo::GPU:
      return DeviceType::kGpu;
    case v1::DeviceInfo::REMOTE:
      return DeviceType::kRemote;
    case v1::DeviceInfo::META:
      return DeviceType::kMeta;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("type: unknown value ", static_cast<int>(type)));
  }
}

v1::DeviceInfo::Caps ToProto(const DeviceCaps& caps) {
  v1::DeviceInfo::Caps out;
  out.set_async(caps.async);
  out.set_events(caps.events);
  out.set_host_buffer(caps.host_buffer);
  out.set_buffer_from_host_ptr(caps.buffer_from_host_ptr);
  return out;
}

DeviceCaps FromProto(const v1::DeviceInfo::Caps& caps) {
  return {.async = caps.async(),
          .events = caps.events(),
          .host_buffer = caps.host_buffer(),
          .buffer_from_host_ptr = caps.buffer_from_host_ptr()};
}

v1::BufferTypeInfo ToProto(const BufferTypeDescription& type) {
  v1::BufferTypeInfo out;
  out.set_name(type.name);
  out.set_alignment(type.alignment);
  out.set_max_size(type.max_size);
  out.set_is_host(type.is_host);
  return out;
}

BufferTypeDescription FromProto(const v1::BufferTypeInfo& type) {
  return {.name = type.name(),
          .alignment = type.alignment(),
          .max_size = type.max_size(),
          .is_host = type.is_host()};
}

v1::DeviceInfo ToProto(const DeviceDescription& device) {
  v1::DeviceInfo out;
  out.set_name(device.props.name);
  out.set_description(device.props.description);
  out.set_type(ToProto(device.props.type));
  out.set_memory_free(device.props.memory_free);
  out.set_memory_total(device.props.memory_total);
  *out.mutable_caps() = ToProto(device.props.caps);
  for (const BufferTypeDescription& type : device.buffer_types) {
    *out.add_buffer_types() = ToProto(type);
  }
  for (const std::string& member : device.props.members) {
    out.add_members(member);
  }
  return out;
}

absl::StatusOr<DeviceDescription> FromProto(const v1::DeviceInfo& device) {
  absl::StatusOr<DeviceType> type = FromProto(device.type());
  if (!type.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", device.name(), ": ", type.status().message()));
  }
  DeviceDescription out;
  out.props.name = device.name();
  out.props.description = device.description();
  out.props.type = *type;
  out.props.memory_free = device.memory_free();
  out.props.memory_total = device.memory_total();
  out.props.caps = FromProto(device.caps());
  for (const v1::BufferTypeInfo& buffer_type : device.buffer_types()) {
    out.buffer_types.push_back(FromProto(buffer_type));
  }
  out.props.members.assign(device.members().begin(), device.members().end());
  return out;
}

}  // namespace tessera::wire
