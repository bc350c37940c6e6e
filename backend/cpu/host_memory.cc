#include "backend/cpu/host_memory.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <sstream>
#include <string>

namespace tessera {
namespace {

// The first 8 KiB of a small file under /proc or /sys (all these are).
std::optional<std::string> ReadFile(const char* path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[8192];
  size_t size = 0;
  ssize_t n = 0;
  while (size < sizeof(buf) &&
         (n = read(fd, buf + size, sizeof(buf) - size)) > 0) {
    size += static_cast<size_t>(n);
  }
  close(fd);
  return std::string(buf, size);
}

std::optional<uint64_t> ParseCount(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  return n;
}

uint64_t PageSize() {
  const long page = sysconf(_SC_PAGE_SIZE);
  return page > 0 ? static_cast<uint64_t>(page) : 4096;
}

// What the cgroup (v2, else v1) still allows; nullopt without a limit.
std::optional<uint64_t> CgroupRoom() {
  const struct {
    const char* limit;
    const char* usage;
  } kFiles[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
       "/sys/fs/cgroup/memory/memory.usage_in_bytes"},
  };
  for (const auto& files : kFiles) {
    std::optional<std::string> limit_text = ReadFile(files.limit);
    if (!limit_text.has_value()) continue;
    const std::optional<uint64_t> limit = CgroupBytes(*limit_text);
    if (!limit.has_value()) return std::nullopt;
    std::optional<std::string> usage_text = ReadFile(files.usage);
    const uint64_t usage =
        CgroupBytes(usage_text.value_or("0")).value_or(0);
    return usage < *limit ? *limit - usage : 0;
  }
  return std::nullopt;
}

// RLIMIT_AS and RLIMIT_DATA less what the process uses of each.
std::optional<uint64_t> RlimitRoom() {
  std::optional<uint64_t> room;
  std::optional<std::string> statm = ReadFile("/proc/self/statm");
  uint64_t fields[7] = {};
  if (statm.has_value()) {
    std::istringstream in(*statm);
    for (uint64_t& f : fields) in >> f;
  }
  const uint64_t page = PageSize();
  const struct {
    int resource;
    uint64_t used;
  } kLimits[] = {{RLIMIT_AS, fields[0] * page}, {RLIMIT_DATA, fields[5] * page}};
  for (const auto& l : kLimits) {
    rlimit limit{};
    if (getrlimit(l.resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
      continue;
    }
    const uint64_t left = l.used < limit.rlim_cur ? limit.rlim_cur - l.used : 0;
    room = std::min(room.value_or(left), left);
  }
  return room;
}

}  // namespace

std::optional<uint64_t> MemInfoBytes(std::string_view meminfo,
                                     std::string_view name) {
  size_t at = 0;
  while (at < meminfo.size()) {
    size_t end = meminfo.find('\n', at);
    if (end == std::string_view::npos) end = meminfo.size();
    std::string_view line = meminfo.substr(at, end - at);
    at = end + 1;
    if (line.size() > name.size() && line.substr(0, name.size()) == name &&
        line[name.size()] == ':') {
      const std::optional<uint64_t> kib = ParseCount(line.substr(name.size() + 1));
      if (!kib.has_value()) return std::nullopt;
      return *kib * 1024;
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> CgroupBytes(std::string_view text) {
  return ParseCount(text);
}

uint64_t HostMemoryRoom() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  uint64_t room = pages > 0 ? static_cast<uint64_t>(pages) * PageSize() : 0;
  if (std::optional<std::string> meminfo = ReadFile("/proc/meminfo")) {
    if (std::optional<uint64_t> available =
            MemInfoBytes(*meminfo, "MemAvailable")) {
      room = std::min(room, *available);
    }
  }
  if (std::optional<uint64_t> cgroup = CgroupRoom()) {
    room = std::min(room, *cgroup);
  }
  if (std::optional<uint64_t> rlimit = RlimitRoom()) {
    room = std::min(room, *rlimit);
  }
  return room;
}

uint64_t UsableHostMemory() {
  const uint64_t room = HostMemoryRoom();
  return room - room / 8;
}

}  // namespace tessera
