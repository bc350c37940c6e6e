#include "server/sessions/device_reserve.h"

#include "absl/strings/str_cat.h"

namespace tessera::server {

absl::Status CheckDeviceReserve(Device& device, uint64_t bytes,
                                uint64_t reserve) {
  if (reserve == 0) return absl::OkStatus();
  const uint64_t free = device.Props().memory_free;
  if (bytes <= free && free - bytes >= reserve) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      bytes, " bytes on ", device.name(), " would leave ",
      bytes <= free ? free - bytes : 0, " of its ", free,
      " free bytes, under the reserve (--device_memory_reserve) of ", reserve,
      " bytes"));
}

}  // namespace tessera::server
