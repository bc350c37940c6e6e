#ifndef TESSERA_SERVER_SESSIONS_DEVICE_RESERVE_H_
#define TESSERA_SERVER_SESSIONS_DEVICE_RESERVE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "backend/device.h"

namespace tessera::server {

// Whether allocating `bytes` on `device` leaves at least `reserve` bytes of
// it free (--device_memory_reserve; 0: no reserve). Errors:
// RESOURCE_EXHAUSTED naming the device, the free bytes and the reserve.
absl::Status CheckDeviceReserve(Device& device, uint64_t bytes,
                                uint64_t reserve);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_DEVICE_RESERVE_H_
