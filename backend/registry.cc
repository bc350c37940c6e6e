#include "backend/registry.h"

#include <charconv>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_device.h"
#ifdef TESSERA_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#endif

namespace tessera {
namespace {

// The most CPU devices one "cpu:N" item may create.
constexpr int kMaxCpuDevices = 256;

// One parsed item of a device spec.
struct SpecItem {
  enum class Kind { kCpu, kGpus } kind;
  int count = 0;  // kCpu: devices to add
};

absl::StatusOr<int> ParseCpuCount(std::string_view item,
                                  std::string_view digits) {
  int count = 0;
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, count);
  if (digits.empty() || ec != std::errc() || ptr != end || count < 1 ||
      count > kMaxCpuDevices) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[AddDevices] bad CPU device count in \"%s\": want 1..%d", item,
        kMaxCpuDevices));
  }
  return count;
}

std::string_view StripSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

absl::StatusOr<std::vector<SpecItem>> ParseSpec(std::string_view spec) {
  std::vector<SpecItem> items;
  std::string_view rest = spec;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = StripSpaces(rest.substr(0, comma));
    if (item == "cpu") {
      items.push_back({SpecItem::Kind::kCpu, 1});
    } else if (item.starts_with("cpu:")) {
      absl::StatusOr<int> count = ParseCpuCount(item, item.substr(4));
      if (!count.ok()) return count.status();
      items.push_back({SpecItem::Kind::kCpu, *count});
    } else if (item == "cuda") {
      items.push_back({SpecItem::Kind::kGpus, 0});
    } else if (item == "all") {
      items.push_back({SpecItem::Kind::kGpus, 0});
      items.push_back({SpecItem::Kind::kCpu, 1});
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "[AddDevices] unknown device \"%s\" in spec \"%s\" (want cpu, "
          "cpu:N, cuda or all)",
          item, spec));
    }
    if (comma == std::string_view::npos) return items;
    rest.remove_prefix(comma + 1);
  }
}

// Adds every GPU that this build has a backend for: the CUDA devices found
// at run time when built with the CUDA Toolkit (none without a GPU or a
// driver). The single place where GPU device factories are called.
absl::Status AddGpuDevices(Registry& registry) {
#ifdef TESSERA_HAVE_CUDA
  absl::StatusOr<std::vector<std::unique_ptr<CudaDevice>>> gpus =
      CreateCudaDevices();
  if (!gpus.ok()) return gpus.status();
  for (std::unique_ptr<CudaDevice>& gpu : *gpus) {
    if (absl::Status s = registry.Add(std::move(gpu)); !s.ok()) return s;
  }
#endif
  return absl::OkStatus();
}

// Adds `count` CPU devices, numbered after the CPU devices already present.
absl::Status AddCpuDevices(int count, int n_threads, Registry& registry) {
  const size_t first = registry.OfType(DeviceType::kCpu).size();
  for (int i = 0; i < count; ++i) {
    CpuDeviceOptions options;
    options.name = absl::StrFormat("cpu%u", first + i);
    options.n_threads = n_threads;
    if (absl::Status s =
            registry.Add(std::make_unique<CpuDevice>(std::move(options)));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Registry::Add(std::unique_ptr<Device> device) {
  if (device == nullptr) {
    return absl::InvalidArgumentError("[Registry::Add] null device");
  }
  if (Find(device->name()).ok()) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "[Registry::Add] a device named \"%s\" is already registered",
        device->name()));
  }
  view_.push_back(device.get());
  owned_.push_back(std::move(device));
  return absl::OkStatus();
}

absl::StatusOr<Device*> Registry::Find(std::string_view name) const {
  for (Device* device : view_) {
    if (device->name() == name) return device;
  }
  return absl::NotFoundError(
      absl::StrFormat("[Registry::Find] no device named \"%s\"", name));
}

std::vector<Device*> Registry::OfType(DeviceType type) const {
  std::vector<Device*> found;
  for (Device* device : view_) {
    if (device->Props().type == type) found.push_back(device);
  }
  return found;
}

absl::Status AddDevices(std::string_view spec, int cpu_threads,
                        Registry& registry) {
  if (cpu_threads < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[AddDevices] cpu_threads must be at least 1, got %d", cpu_threads));
  }
  // Parse the whole spec first so that a bad item adds nothing.
  absl::StatusOr<std::vector<SpecItem>> items = ParseSpec(spec);
  if (!items.ok()) return items.status();
  for (const SpecItem& item : *items) {
    absl::Status s = item.kind == SpecItem::Kind::kCpu
                         ? AddCpuDevices(item.count, cpu_threads, registry)
                         : AddGpuDevices(registry);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace tessera
