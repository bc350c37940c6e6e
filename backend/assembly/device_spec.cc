#include "backend/assembly/device_spec.h"

#include <algorithm>
#include <charconv>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backend/comm/host_communicator.h"
#include "backend/cpu/cpu_registry.h"
#include "backend/meta/llama_policy.h"
#include "backend/meta/meta_device.h"
#include "base/status_macros.h"
#ifdef TESSERA_HAVE_CUDA
#include "backend/comm/nccl_communicator.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_registry.h"
#endif

namespace tessera {
namespace {

// The most CPU devices one "cpu:N" item may create.
constexpr int kMaxCpuDevices = 256;

// The most members of one meta device.
constexpr int kMaxMetaMembers = 64;

// One parsed item of a device spec.
struct SpecItem {
  enum class Kind { kCpu, kGpus, kMeta } kind;
  int count = 0;  // kCpu: devices to add
  // kMeta: the device's name and its members' names.
  std::string name;
  std::vector<std::string> members;
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

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

bool IsName(std::string_view s) {
  return !s.empty() && s.size() <= 64 &&
         std::all_of(s.begin(), s.end(), IsNameChar);
}

// "NAME=meta(M0,M1,...)".
absl::StatusOr<SpecItem> ParseMeta(std::string_view item) {
  auto bad = [&](std::string_view problem) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[AddDevices] meta device \"%s\": %s (want NAME=meta(M0,M1,...))", item,
        problem));
  };
  const size_t eq = item.find('=');
  SpecItem out{.kind = SpecItem::Kind::kMeta,
               .name = std::string(StripSpaces(item.substr(0, eq)))};
  if (!IsName(out.name)) {
    return bad("the name is not 1 to 64 of [A-Za-z0-9_.-]");
  }
  std::string_view body = StripSpaces(item.substr(eq + 1));
  if (!body.starts_with("meta(") || !body.ends_with(")")) {
    return bad("not meta(...)");
  }
  body = body.substr(5, body.size() - 6);
  absl::flat_hash_set<std::string> seen;
  while (true) {
    const size_t comma = body.find(',');
    std::string member(StripSpaces(body.substr(0, comma)));
    if (!IsName(member)) return bad("a member name is empty or malformed");
    if (!seen.insert(member).second) {
      return bad(absl::StrFormat("member %s is listed twice", member));
    }
    out.members.push_back(std::move(member));
    if (comma == std::string_view::npos) break;
    body.remove_prefix(comma + 1);
  }
  if (out.members.size() < 2 ||
      out.members.size() > static_cast<size_t>(kMaxMetaMembers)) {
    return bad(absl::StrFormat("%d members, want 2 to %d", out.members.size(),
                               kMaxMetaMembers));
  }
  return out;
}

// The end of the item starting at `rest`: the first comma outside
// parentheses, or npos.
size_t ItemEnd(std::string_view rest) {
  int depth = 0;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == '(') ++depth;
    if (rest[i] == ')') --depth;
    if (rest[i] == ',' && depth == 0) return i;
  }
  return std::string_view::npos;
}

absl::StatusOr<std::vector<SpecItem>> ParseSpec(std::string_view spec) {
  std::vector<SpecItem> items;
  std::string_view rest = spec;
  while (true) {
    const size_t comma = ItemEnd(rest);
    const std::string_view item = StripSpaces(rest.substr(0, comma));
    if (item.find('=') != std::string_view::npos) {
      TESSERA_ASSIGN_OR_RETURN(SpecItem meta, ParseMeta(item));
      items.push_back(std::move(meta));
    } else if (item == "cpu") {
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
          "cpu:N, cuda, all or NAME=meta(M0,M1,...))",
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

// The communicator for `members`: host for CPU devices, NCCL for CUDA
// devices.
absl::StatusOr<std::unique_ptr<Communicator>> CommunicatorFor(
    const SpecItem& item, const std::vector<Device*>& members) {
  const DeviceType type = members[0]->Props().type;
  for (Device* d : members) {
    if (d->Props().type != type) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "[AddDevices] meta device %s: members %s are not all of one kind",
          item.name, absl::StrJoin(item.members, ",")));
    }
  }
  if (type == DeviceType::kCpu) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<HostCommunicator> comm,
                             HostCommunicator::Create(members));
    return std::unique_ptr<Communicator>(std::move(comm));
  }
#ifdef TESSERA_HAVE_CUDA
  if (type == DeviceType::kGpu) {
    std::vector<int> ordinals;
    for (Device* d : members) {
      auto* cuda = dynamic_cast<CudaDevice*>(d);
      if (cuda == nullptr) break;
      ordinals.push_back(cuda->ordinal());
    }
    if (ordinals.size() == members.size()) {
      TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
                               NcclCommunicator::Create(members, ordinals));
      return std::unique_ptr<Communicator>(std::move(comm));
    }
  }
#endif
  return absl::InvalidArgumentError(absl::StrFormat(
      "[AddDevices] meta device %s: no communicator for %s members (want "
      "all CPU or all CUDA devices)",
      item.name, DeviceTypeName(type)));
}

absl::Status AddMetaDevice(const SpecItem& item, Registry& registry) {
  std::vector<Device*> members;
  for (const std::string& name : item.members) {
    absl::StatusOr<Device*> member = registry.Find(name);
    if (!member.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "[AddDevices] meta device %s: no device named \"%s\" for a member",
          item.name, name));
    }
    members.push_back(*member);
  }
  if (registry.Find(item.name).ok()) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "[AddDevices] meta device %s: a device of that name exists",
        item.name));
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                           CommunicatorFor(item, members));
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<MetaDevice> meta,
      MetaDevice::Create(item.name, std::move(members), std::move(comm),
                         MirroredPolicy()));
  return registry.Add(std::move(meta));
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
    if (item.kind == SpecItem::Kind::kMeta) continue;
    TESSERA_RETURN_IF_ERROR(
        item.kind == SpecItem::Kind::kCpu
            ? AddCpuDevices(item.count, cpu_threads, registry)
            : AddGpuDevices(registry));
  }
  for (const SpecItem& item : items) {
    if (item.kind != SpecItem::Kind::kMeta) continue;
    TESSERA_RETURN_IF_ERROR(AddMetaDevice(item, registry));
  }
  return absl::OkStatus();
}

}  // namespace tessera
