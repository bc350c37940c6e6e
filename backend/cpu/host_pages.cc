#include "backend/cpu/host_pages.h"

#include <sys/mman.h>

#include <cstdlib>

namespace tessera {

void HostPagesFree::operator()(void* p) const { std::free(p); }

HostPages AllocHostPages(size_t bytes) {
  const bool huge = bytes >= kHugePageBytes;
  const size_t alignment = huge ? kHugePageBytes : 64;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, bytes == 0 ? 1 : bytes) != 0) {
    return nullptr;
  }
  // Advice only: where the kernel has no huge pages the block keeps small
  // ones, so the result does not matter.
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  return HostPages(p);
}

}  // namespace tessera
