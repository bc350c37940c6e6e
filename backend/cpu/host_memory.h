#ifndef TESSERA_BACKEND_CPU_HOST_MEMORY_H_
#define TESSERA_BACKEND_CPU_HOST_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

// Bytes of host memory this process can still allocate AND back with real
// pages, now: the least of
//  - the machine's MemAvailable (/proc/meminfo; physical memory without it);
//  - the cgroup's memory.max minus memory.current (cgroup v2), or
//    memory.limit_in_bytes minus memory.usage_in_bytes (v1);
//  - RLIMIT_AS minus the address space in use, RLIMIT_DATA minus the data
//    segment in use (/proc/self/statm).
// Limits that are absent or unlimited do not count. Reads a few files in
// /proc and /sys (about 0.1 ms, most of it /proc/meminfo).
uint64_t HostMemoryRoom();

// What the CPU devices of a process may share: HostMemoryRoom() at the
// time of the call less an eighth, left for the process itself (requests,
// staging, caches, thread stacks).
uint64_t UsableHostMemory();

// The parsers HostMemoryRoom uses, for tests.
// A "Name:   N kB" field of /proc/meminfo in bytes; nullopt when absent.
std::optional<uint64_t> MemInfoBytes(std::string_view meminfo,
                                     std::string_view name);
// A cgroup memory file: a byte count, or nullopt for "max" or garbage.
std::optional<uint64_t> CgroupBytes(std::string_view text);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_HOST_MEMORY_H_
