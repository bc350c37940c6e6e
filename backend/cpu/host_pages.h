#ifndef TESSERA_BACKEND_CPU_HOST_PAGES_H_
#define TESSERA_BACKEND_CPU_HOST_PAGES_H_

#include <cstddef>
#include <memory>

namespace tessera {

// Host memory for tensors. A block of kHugePageBytes or more starts on a
// huge-page boundary and asks the kernel for transparent huge pages
// (madvise MADV_HUGEPAGE; nothing changes where THP is off): streaming a
// model's weights through 4 KiB pages costs a TLB miss every 4 KiB, which
// in a virtual machine is a walk of two page tables. On a 2-core Sapphire
// Rapids-class VM a 2-thread read of 1 GiB ran at 26 GB/s on 4 KiB pages
// and 37 GB/s on huge pages. Smaller blocks are 64-byte aligned.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

struct HostPagesFree {
  void operator()(void* p) const;
};
using HostPages = std::unique_ptr<void, HostPagesFree>;

// At least max(bytes, 1) bytes, or null when the allocator refuses.
HostPages AllocHostPages(size_t bytes);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_HOST_PAGES_H_
