#include "backend/assembly/device_spec.h"

#include <charconv>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_registry.h"
#include "base/status_macros.h"
#ifdef TESSERA_HAVE_CUDA
#include "backend/cuda/cuda_registry.h"
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
      TESSERA_ASSIGN_OR_RETURN(int count, ParseCpuCount(item, item.substr(4)));
      items.push_back({SpecItem::Kind::kCpu, count});
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

// Every GPU that this build has a backend for.
absl::Status AddGpuDevices(Registry& registry) {
#ifdef TESSERA_HAVE_CUDA
  return AddCudaDevices(registry);
#else
  return absl::OkStatus();
#endif
}

}  // namespace

absl::Status AddDevices(std::string_view spec, int cpu_threads,
                        Registry& registry) {
  if (cpu_threads < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[AddDevices] cpu_threads must be at least 1, got %d", cpu_threads));
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<SpecItem> items, ParseSpec(spec));
  for (const SpecItem& item : items) {
    TESSERA_RETURN_IF_ERROR(
        item.kind == SpecItem::Kind::kCpu
            ? AddCpuDevices(item.count, cpu_threads, registry)
            : AddGpuDevices(registry));
  }
  return absl::OkStatus();
}

}  // namespace tessera
