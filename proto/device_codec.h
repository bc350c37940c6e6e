#ifndef TESSERA_PROTO_DEVICE_CODEC_H_
#define TESSERA_PROTO_DEVICE_CODEC_H_

// Devices on the wire: DeviceProps and buffer types <-> v1::DeviceInfo
// (ListDevices). The daemon describes its devices with ToProto;
// RemoteDevice takes its properties from FromProto.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/device.h"
#include "proto/tessera.pb.h"

namespace tessera::wire {

// A buffer type as the wire describes it (v1::BufferTypeInfo).
struct BufferTypeDescription {
  std::string name;
  size_t alignment = 0;
  size_t max_size = 0;
  bool is_host = false;

  bool operator==(const BufferTypeDescription&) const = default;
};

// A device as the wire describes it (v1::DeviceInfo): its properties and
// its buffer types, its own memory first.
struct DeviceDescription {
  DeviceProps props;
  std::vector<BufferTypeDescription> buffer_types;
};

// The description of `device`: Props(), then buffer_type() and, when it
// has one, host_buffer_type().
DeviceDescription Describe(Device& device);
BufferTypeDescription Describe(BufferType& type);

v1::DeviceInfo::Type ToProto(DeviceType type);
// Errors: INVALID_ARGUMENT for TYPE_UNSPECIFIED or an unknown value.
absl::StatusOr<DeviceType> FromProto(v1::DeviceInfo::Type type);

v1::DeviceInfo::Caps ToProto(const DeviceCaps& caps);
DeviceCaps FromProto(const v1::DeviceInfo::Caps& caps);

v1::BufferTypeInfo ToProto(const BufferTypeDescription& type);
BufferTypeDescription FromProto(const v1::BufferTypeInfo& type);

v1::DeviceInfo ToProto(const DeviceDescription& device);
// Errors: INVALID_ARGUMENT "device NAME: ..." for an unknown device type.
absl::StatusOr<DeviceDescription> FromProto(const v1::DeviceInfo& device);

}  // namespace tessera::wire

#endif  // TESSERA_PROTO_DEVICE_CODEC_H_
