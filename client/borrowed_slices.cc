#include "client/borrowed_slices.h"

namespace tessera::client {

BorrowedSlices::BorrowedSlices() : count_(std::make_shared<Count>()) {}

BorrowedSlices::~BorrowedSlices() {
  std::unique_lock<std::mutex> lock(count_->mu);
  count_->released.wait(lock, [this] { return count_->live == 0; });
}

grpc::Slice BorrowedSlices::Borrow(const void* data, size_t size) {
  {
    std::lock_guard<std::mutex> lock(count_->mu);
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
  std::lock_guard<std::mutex> lock((*count)->mu);
  --(*count)->live;
  (*count)->released.notify_all();
}

}  // namespace tessera::client
