#ifndef TESSERA_BACKEND_CUDA_KERNEL_ERROR_H_
#define TESSERA_BACKEND_CUDA_KERNEL_ERROR_H_

// The record through which kernels report data-dependent errors (a row index
// out of range) to the host. Plain data shared by .cu and .cc files.

#include <cstdint>

namespace tessera::cuda_kernels {

enum KernelErrorCode : int32_t {
  kKernelOk = 0,
  // A GET_ROWS or SET_ROWS index outside [0, limit): `op` is the Op value,
  // `value` the index, `limit` the row count.
  kKernelRowIndexOutOfRange = 1,
  // Set by the host: an event of another kind of device failed while a
  // stream waited for it; `message` says why.
  kKernelForeignEventFailed = 2,
};

// The first error on a stream. Kernels claim it with atomicCAS on `code`
// and then fill in the details; later errors leave it alone.
struct KernelError {
  int32_t code;
  int32_t op;
  int64_t value;
  int64_t limit;
  char message[232];
};
static_assert(sizeof(KernelError) == 256);

}  // namespace tessera::cuda_kernels

#endif  // TESSERA_BACKEND_CUDA_KERNEL_ERROR_H_
