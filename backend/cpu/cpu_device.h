#ifndef TESSERA_BACKEND_CPU_CPU_DEVICE_H_
#define TESSERA_BACKEND_CPU_CPU_DEVICE_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_level.h"
#include "backend/device.h"
#include "backend/task_queue.h"

namespace tessera {

struct CpuDeviceOptions {
  std::string name = "cpu0";
  // Threads that each stream of the device computes with (>= 1).
  int n_threads = 1;
  // Bytes the device may allocate; 0 means UsableHostMemory() when it is
  // made (backend/cpu/host_memory.h). Allocations of 4 MiB or more past
  // what the host can back at the time (HostMemoryRoom) are refused too,
  // whatever the limit.
  size_t memory_limit = 0;
  // The highest SIMD level the kernels may use; the device uses the lower
  // of this and what the CPU supports (DetectSimdLevel()).
  SimdLevel max_simd = SimdLevel::kAmx;
};

// A CPU device. Each stream owns a worker thread that runs its queue and a
// pool of n_threads - 1 helper threads for the rows of each op, started when
// it has work and gone once it has idled a while (CpuStream); several CPU
// devices in one process are independent (own threads, own memory
// accounting), so multi-device code can be tested on one machine.
class CpuDevice final : public Device {
 public:
  explicit CpuDevice(CpuDeviceOptions options);
  ~CpuDevice() override;

  const std::string& name() const override { return options_.name; }
  DeviceProps Props() override;
  BufferType& buffer_type() override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateCallerStream() override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  bool SupportsOp(const Tensor& node) const override;
  bool SupportsBufferType(const BufferType& type) const override;

  int n_threads() const { return options_.n_threads; }
  // The SIMD level the device's kernels run at, and their table.
  SimdLevel simd_level() const { return kernels_.level; }
  const CpuKernels& kernels() const { return kernels_; }
  // Bytes currently allocated in this device's buffers.
  size_t memory_used() const { return used_.load(); }

 private:
  friend class CpuBufferType;
  absl::StatusOr<std::unique_ptr<Stream>> NewStream(TaskQueue::Runner runner);
  const CpuDeviceOptions options_;
  const size_t memory_total_;
  const CpuKernels& kernels_;
  std::atomic<size_t> used_{0};
  std::unique_ptr<BufferType> buffer_type_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_DEVICE_H_
