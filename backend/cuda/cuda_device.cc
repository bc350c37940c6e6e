#include "backend/cuda/cuda_device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backend/cuda/cuda_buffer.h"
#include "backend/cuda/cuda_compute.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/cuda_event.h"
#include "backend/cuda/cuda_host_buffer.h"
#include "backend/cuda/cuda_stream.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(
    CudaDeviceOptions options) {
  const std::string name = options.name.empty()
                               ? absl::StrCat("cuda", options.ordinal)
                               : options.name;
  auto unavailable = [&name](const absl::Status& s) {
    cudaGetLastError();  // a failed open leaves no error behind
    return absl::UnavailableError(
        absl::StrFormat("[%s] cannot open the device: %s", name, s.message()));
  };
  int count = 0;
  if (absl::Status s = TESSERA_CUDA_STATUS(cudaGetDeviceCount(&count));
      !s.ok()) {
    return unavailable(s);
  }
  if (options.ordinal < 0 || options.ordinal >= count) {
    return absl::UnavailableError(
        absl::StrFormat("[%s] there is no CUDA device %d (%d found)", name,
                        options.ordinal, count));
  }
  cudaDeviceProp properties{};
  size_t free = 0;
  size_t total = 0;
  if (absl::Status s = TESSERA_CUDA_STATUS(cudaSetDevice(options.ordinal));
      !s.ok()) {
    return unavailable(s);
  }
  if (absl::Status s = TESSERA_CUDA_STATUS(
          cudaGetDeviceProperties(&properties, options.ordinal));
      !s.ok()) {
    return unavailable(s);
  }
  if (absl::Status s = TESSERA_CUDA_STATUS(cudaMemGetInfo(&free, &total));
      !s.ok()) {
    return unavailable(s);
  }
  absl::StatusOr<std::unique_ptr<ForeignWaits>> foreign_waits =
      ForeignWaits::Create(name);
  if (!foreign_waits.ok()) return foreign_waits.status();
  std::unique_ptr<CudaDevice> device(new CudaDevice(
      std::move(options), name, properties, total, *std::move(foreign_waits)));
  device->last_free_.store(free);
  return device;
}

CudaDevice::CudaDevice(CudaDeviceOptions options, std::string name,
                       const cudaDeviceProp& properties, size_t memory_total,
                       std::unique_ptr<ForeignWaits> foreign_waits)
    : options_(std::move(options)),
      name_(std::move(name)),
      properties_(properties),
      memory_total_(memory_total),
      chunk_source_(MakeCudaChunkSource(*this)),
      pool_(std::make_unique<CudaPool>(absl::StrCat(name_, " pool"),
                                       memory_total_, *chunk_source_,
                                       options_.pool_chunk_size)),
      buffer_type_(std::make_unique<CudaBufferType>(*this, memory_total_)),
      host_buffer_type_(std::make_unique<CudaHostBufferType>(*this)),
      foreign_waits_(std::move(foreign_waits)) {}

CudaDevice::~CudaDevice() = default;

DeviceProps CudaDevice::Props() {
  DeviceProps props;
  props.name = name_;
  props.description = absl::StrFormat(
      "%s, sm_%d%d, %d SMs", properties_.name, properties_.major,
      properties_.minor, properties_.multiProcessorCount);
  props.type = DeviceType::kGpu;
  props.memory_total = memory_total_;
  if (Activate("Props").ok()) {
    size_t free = 0;
    size_t total = 0;
    if (Check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", "Props").ok()) {
      last_free_.store(free);
    }
  }
  if (absl::Status s = health(); !s.ok()) {
    absl::StrAppend(&props.description, " (unhealthy: ", s.message(), ")");
  }
  props.memory_free = last_free_.load();
  props.caps.async = true;
  props.caps.events = true;
  props.caps.host_buffer = true;
  props.caps.buffer_from_host_ptr = true;
  return props;
}

BufferType& CudaDevice::buffer_type() { return *buffer_type_; }

BufferType* CudaDevice::host_buffer_type() { return host_buffer_type_.get(); }

absl::StatusOr<std::unique_ptr<Stream>> CudaDevice::CreateStream() {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<CudaStream> stream,
                           CudaStream::Create(*this));
  return std::unique_ptr<Stream>(std::move(stream));
}

absl::StatusOr<std::unique_ptr<Event>> CudaDevice::CreateEvent() {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<CudaEvent> event,
                           CudaEvent::Create(*this));
  return std::unique_ptr<Event>(std::move(event));
}

bool CudaDevice::SupportsOp(const Tensor& node) const {
  return CudaSupportsNode(node);
}

bool CudaDevice::SupportsBufferType(const BufferType& type) const {
  return &type == buffer_type_.get();
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaDevice::BufferFromHostPtr(
    void* ptr, size_t size) {
  return RegisterHostMemory(*host_buffer_type_, ptr, size);
}

absl::Status CudaDevice::health() const {
  if (healthy_.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return unhealthy_status_;
}

absl::Status CudaDevice::Check(cudaError_t error, std::string_view call,
                               std::string_view where) {
  if (error == cudaSuccess) return absl::OkStatus();
  const absl::Status status = CudaStatus(error, call);
  const absl::Status prefixed(
      status.code(),
      absl::StrFormat("[%s %s] %s", name_, where, status.message()));
  if (IsStickyCudaError(error)) {
    MarkUnhealthy(prefixed);
  } else {
    cudaGetLastError();  // so that it is not reported by a later launch
  }
  return prefixed;
}

void CudaDevice::MarkUnhealthy(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (!healthy_.load()) return;
  unhealthy_status_ = absl::FailedPreconditionError(absl::StrFormat(
      "[%s] the device is unhealthy after a sticky error: %s", name_,
      status.message()));
  healthy_.store(false);
  spdlog::error("{}", std::string(unhealthy_status_.message()));
}

absl::Status CudaDevice::Activate(std::string_view where) {
  TESSERA_RETURN_IF_ERROR(health());
  return Check(cudaSetDevice(options_.ordinal), "cudaSetDevice", where);
}

bool CudaDevice::EnablePeerAccess(int peer_ordinal) {
  if (peer_ordinal == options_.ordinal) return true;
  absl::MutexLock lock(&mu_);
  if (auto it = peer_access_.find(peer_ordinal); it != peer_access_.end()) {
    return it->second;
  }
  int can_access = 0;
  bool enabled = false;
  if (cudaDeviceCanAccessPeer(&can_access, options_.ordinal, peer_ordinal) ==
          cudaSuccess &&
      can_access != 0 && cudaSetDevice(options_.ordinal) == cudaSuccess) {
    const cudaError_t error = cudaDeviceEnablePeerAccess(peer_ordinal, 0);
    enabled = error == cudaSuccess || error == cudaErrorPeerAccessAlreadyEnabled;
  }
  cudaGetLastError();  // a refusal is an answer, not an error
  peer_access_[peer_ordinal] = enabled;
  spdlog::info("[{}] peer access to CUDA device {}: {}", name_, peer_ordinal,
               enabled ? "direct" : "staged by the driver");
  return enabled;
}

absl::StatusOr<std::vector<std::unique_ptr<CudaDevice>>> CreateCudaDevices() {
  std::vector<std::unique_ptr<CudaDevice>> devices;
  int count = 0;
  if (absl::Status s = TESSERA_CUDA_STATUS(cudaGetDeviceCount(&count));
      !s.ok()) {
    cudaGetLastError();
    spdlog::info("[CreateCudaDevices] no CUDA devices: {}",
                 std::string(s.message()));
    return devices;
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CudaDeviceOptions options;
    options.ordinal = ordinal;
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device,
                             CudaDevice::Create(std::move(options)));
    spdlog::info("[CreateCudaDevices] {}: {}", device->name(),
                 device->Props().description);
    devices.push_back(std::move(device));
  }
  return devices;
}

CudaDevice* CudaDeviceOf(const Tensor& t) {
  auto* buffer = dynamic_cast<CudaBuffer*>(t.buffer);
  return buffer != nullptr ? &buffer->cuda_device() : nullptr;
}

}  // namespace tessera
