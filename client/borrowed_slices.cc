#include "client/borrowed_slices.h"

namespace tessera::client {

BorrowedSlices::BorrowedSlices() : count_(std::make_shared<Count>()) {}

BorrowedSlices::~BorrowedSlices() {
  Count& count = *count_;
  absl::MutexLock lock(&count.mu);
  count.mu.Await(absl::Condition(
      +[](Count* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) { return c->live == 0; },
      &count));
}

grpc::Slice BorrowedSlices::Borrow(const void* data, size_t size) {
  {
    absl::MutexLock lock(&count_->mu);
    ++count_->live;
  }
  // Each slice holds the count, so a release after the owner stopped
  // waiting still finds it.
  auto* holder = new std::shared_ptr<Count>(count_);
  return grpc::Slice(const_cast<void*>(data), size, &BorrowedSlices::Release,
                     holder);
}

void BorrowedSlices::Release(void* holder) {
  std::unique_ptr<std::shared_ptr<Count>> count(
      static_cast<std::shared_ptr<Count>*>(holder));
  absl::MutexLock lock(&(*count)->mu);
  --(*count)->live;
}

}  // namespace tessera::client
