#ifndef TESSERA_CLIENT_BORROWED_SLICES_H_
#define TESSERA_CLIENT_BORROWED_SLICES_H_

// gRPC slices over memory the caller owns, for sending it without a copy,
// and a wait until gRPC has released every one of them so that the memory
// may be reused.

#include <cstddef>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/slice.h"

namespace tessera::client {

class BorrowedSlices {
 public:
  BorrowedSlices();
  // Waits for the release of every slice made.
  ~BorrowedSlices();
  BorrowedSlices(const BorrowedSlices&) = delete;
  BorrowedSlices& operator=(const BorrowedSlices&) = delete;

  // A slice over [data, data + size); the memory must stay valid and
  // unchanged until this object is destroyed.
  grpc::Slice Borrow(const void* data, size_t size);

 private:
  // Shared with every slice made; outlives this object while gRPC holds one.
  struct Count {
    absl::Mutex mu;
    size_t live ABSL_GUARDED_BY(mu) = 0;
  };
  static void Release(void* holder);

  const std::shared_ptr<Count> count_;
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_BORROWED_SLICES_H_
