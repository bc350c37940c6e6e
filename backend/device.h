#ifndef TESSERA_BACKEND_DEVICE_H_
#define TESSERA_BACKEND_DEVICE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/event.h"
#include "backend/stream.h"
#include "graph/tensor.h"

namespace tessera {

// kMeta: a tensor-parallel device over member devices (backend/meta).
enum class DeviceType { kCpu, kGpu, kRemote, kMeta };
std::string_view DeviceTypeName(DeviceType type);

// Optional features, declared up front.
struct DeviceCaps {
  bool async = false;                 // streams queue work and return
  bool events = false;                // CreateEvent works
  bool host_buffer = false;           // host_buffer_type() is not null
  bool buffer_from_host_ptr = false;  // host memory can be wrapped
};

struct DeviceProps {
  std::string name;  // unique in a Registry, e.g. "cpu0", "cuda1"
  std::string description;
  DeviceType type = DeviceType::kCpu;
  size_t memory_free = 0;
  size_t memory_total = 0;
  DeviceCaps caps;
  // kMeta: the names of the member devices, rank 0 first; else empty.
  std::vector<std::string> members;
};

// A compute device (ggml_backend_dev). Thread-safe.
class Device {
 public:
  virtual ~Device() = default;

  virtual const std::string& name() const = 0;
  virtual DeviceProps Props() = 0;

  // The device's own memory.
  virtual BufferType& buffer_type() = 0;
  // Pinned host memory for staging, if caps.host_buffer; else null.
  virtual BufferType* host_buffer_type() { return nullptr; }

  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream() = 0;
  // A stream whose work runs on the thread that queues it, before the
  // queuing call returns, where the device's streams can work that way (the
  // CPU's); otherwise CreateStream()'s. For a caller that waits for each
  // piece of work anyway (a connection of a synchronous protocol): it saves
  // handing the work to a stream thread and back.
  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateCallerStream() {
    return CreateStream();
  }
  // Errors: UNIMPLEMENTED unless caps.events.
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;

  // Whether this device computes `node` (its op, types and shapes).
  virtual bool SupportsOp(const Tensor& node) const = 0;
  // Whether this device's streams can compute on tensors in `type`.
  virtual bool SupportsBufferType(const BufferType& type) const = 0;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_DEVICE_H_
