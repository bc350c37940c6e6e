#include "backend/cpu/cpu_device.h"


#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_buffer.h"
#include "backend/cpu/host_memory.h"
#include "backend/cpu/cpu_stream.h"
#include "backend/ticket_event.h"
#include "graph/op_types.h"

namespace tessera {
namespace {

// n_threads below 1 means 1: every stream has at least its worker.
CpuDeviceOptions Normalized(CpuDeviceOptions options) {
  options.n_threads = std::max(options.n_threads, 1);
  return options;
}

}  // namespace

CpuDevice::CpuDevice(CpuDeviceOptions options)
    : options_(Normalized(std::move(options))),
      memory_total_(options_.memory_limit > 0 ? options_.memory_limit
                                              : UsableHostMemory()),
      kernels_(KernelsFor(std::min(options_.max_simd, DetectSimdLevel()))),
      buffer_type_(std::make_unique<CpuBufferType>(*this)) {}

CpuDevice::~CpuDevice() = default;

DeviceProps CpuDevice::Props() {
  DeviceProps props;
  props.name = options_.name;
  props.description =
      absl::StrFormat("CPU, %d threads per stream, %s kernels",
                      options_.n_threads, SimdLevelName(kernels_.level));
  props.type = DeviceType::kCpu;
  props.memory_total = memory_total_;
  const size_t used = used_.load();
  props.memory_free = used < memory_total_ ? memory_total_ - used : 0;
  props.caps.async = true;
  props.caps.events = true;
  props.caps.host_buffer = false;
  props.caps.buffer_from_host_ptr = false;
  return props;
}

BufferType& CpuDevice::buffer_type() { return *buffer_type_; }

absl::StatusOr<std::unique_ptr<Stream>> CpuDevice::CreateStream() {
  return NewStream(TaskQueue::Runner::kWorker);
}

absl::StatusOr<std::unique_ptr<Stream>> CpuDevice::CreateCallerStream() {
  return NewStream(TaskQueue::Runner::kCaller);
}

absl::StatusOr<std::unique_ptr<Stream>> CpuDevice::NewStream(
    TaskQueue::Runner runner) {
  absl::StatusOr<std::unique_ptr<CpuStream>> stream =
      CpuStream::Create(*this, runner);
  if (!stream.ok()) return stream.status();
  return std::unique_ptr<Stream>(std::move(*stream));
}

absl::StatusOr<std::unique_ptr<Event>> CpuDevice::CreateEvent() {
  return std::make_unique<TicketEvent>(*this);
}

bool CpuDevice::SupportsOp(const Tensor& node) const {
  return OpHasTypes(node);
}

bool CpuDevice::SupportsBufferType(const BufferType& type) const {
  return type.is_host();
}

}  // namespace tessera
