#ifndef TESSERA_BACKEND_CUDA_FOREIGN_WAITS_H_
#define TESSERA_BACKEND_CUDA_FOREIGN_WAITS_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/cuda/kernel_error.h"
#include "backend/event.h"

namespace tessera {

// Lets CUDA streams wait for events of other kinds of devices (CPU,
// remote) without blocking any CUDA thread. A waiting stream runs a kernel
// that spins on a counter in mapped host memory (cuda_kernels::
// WaitHostFlag) until it reaches the wait's target; one thread per device
// polls the captured marks (EventMark::IsDone) and releases each stream's
// waits in order: it writes a failed mark's status into the stream's
// foreign error record (unless that holds an error already), then stores
// the target. Polling never blocks on one mark, so no wait can hold up
// another, and no driver callback thread ever waits. Thread-safe.
class ForeignWaits {
 public:
  // Errors: RESOURCE_EXHAUSTED when the polling thread cannot start.
  static absl::StatusOr<std::unique_ptr<ForeignWaits>> Create(
      std::string name);
  // Releases every wait still pending (CANCELLED), then joins the thread.
  ~ForeignWaits();
  ForeignWaits(const ForeignWaits&) = delete;
  ForeignWaits& operator=(const ForeignWaits&) = delete;

  // Queues a wait of the stream `key`: once `mark` is done, its failure
  // (prefixed by `prefix`) goes into `record` and `*flag` becomes `target`.
  // A stream's targets increase; its waits are released in the order
  // added. `flag` and `record` must stay valid until the wait is released
  // (Cancel releases them at once).
  void Add(const void* key, uint64_t* flag, uint64_t target,
           std::unique_ptr<EventMark> mark, cuda_kernels::KernelError* record,
           std::string prefix);
  // Releases the waits of stream `key` now, as failed with CANCELLED (for
  // a stream being destroyed).
  void Cancel(const void* key);

 private:
  struct Wait {
    uint64_t* flag;
    uint64_t target;
    std::unique_ptr<EventMark> mark;
    cuda_kernels::KernelError* record;
    std::string prefix;
  };

  explicit ForeignWaits(std::string name) : name_(std::move(name)) {}
  void Poll();
  // Writes `status` (if failed) into the wait's record, then its target.
  static void Release(Wait& wait, const absl::Status& status);

  const std::string name_;
  absl::Mutex mu_;
  absl::flat_hash_map<const void*, std::deque<Wait>> waits_
      ABSL_GUARDED_BY(mu_);
  uint64_t added_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Started last in Create, joined first in the destructor.
  std::thread poller_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CUDA_FOREIGN_WAITS_H_
