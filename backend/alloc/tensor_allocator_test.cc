#include "backend/alloc/tensor_allocator.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/cpu/cpu_device.h"
#include "graph/context.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr size_t kAlign = 64;  // CpuBufferType's alignment

uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// An F32 tensor of `n` values.
Tensor* NewF32(Context& ctx, int64_t n) {
  absl::StatusOr<Tensor*> t = ctx.NewTensor(Type::kF32, {n});
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

// A view of `src` (which need not be a view root) of `n` F32 values at
// byte `offset`, built by hand as ops.h's VIEW would.
Tensor* NewView(Context& ctx, Tensor* src, int64_t n, size_t offset) {
  Tensor* v = NewF32(ctx, n);
  v->op = Op::kView;
  v->src[0] = src;
  v->view_src = src;
  v->view_offs = offset;
  return v;
}

class TensorAllocatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<Buffer> NewBuffer(size_t size) {
    absl::StatusOr<std::unique_ptr<Buffer>> buffer =
        device_.buffer_type().Alloc(size);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    return buffer.ok() ? *std::move(buffer) : nullptr;
  }

  CpuDevice device_{CpuDeviceOptions{}};
  Context ctx_;
};

TEST_F(TensorAllocatorTest, PlacesTensorsOneAfterAnotherAtTheAlignment) {
  ASSERT_EQ(device_.buffer_type().alignment(), kAlign);
  std::unique_ptr<Buffer> buffer = NewBuffer(1024);
  ASSERT_NE(buffer, nullptr);
  TensorAllocator alloc(*buffer);
  EXPECT_EQ(alloc.used(), 0u);

  // 40, 4 and 100 bytes: offsets 0, 64 and 128 (the next multiples of 64).
  Tensor* a = NewF32(ctx_, 10);
  Tensor* b = NewF32(ctx_, 1);
  Tensor* c = NewF32(ctx_, 25);
  ASSERT_TRUE(alloc.Alloc(*a).ok());
  ASSERT_TRUE(alloc.Alloc(*b).ok());
  ASSERT_TRUE(alloc.Alloc(*c).ok());
  char* base = static_cast<char*>(buffer->base());
  EXPECT_EQ(a->data, base);
  EXPECT_EQ(b->data, base + 64);
  EXPECT_EQ(c->data, base + 128);
  EXPECT_EQ(alloc.used(), 128u + 100u);
  for (Tensor* t : {a, b, c}) {
    EXPECT_EQ(t->buffer, buffer.get());
    EXPECT_EQ(Address(t->data) % kAlign, 0u);
    absl::StatusOr<size_t> offset = buffer->OffsetOf(*t);
    EXPECT_TRUE(offset.ok()) << offset.status();
  }
}

TEST_F(TensorAllocatorTest, ResourceExhaustedWhenFull) {
  std::unique_ptr<Buffer> buffer = NewBuffer(256);
  ASSERT_NE(buffer, nullptr);
  TensorAllocator alloc(*buffer);
  Tensor* a = NewF32(ctx_, 40);  // 160 bytes at 0
  ASSERT_TRUE(alloc.Alloc(*a).ok());

  Tensor* b = NewF32(ctx_, 40);  // would be 160 bytes at 192: past 256
  absl::Status status = alloc.Alloc(*b);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_EQ(b->data, nullptr);
  EXPECT_EQ(b->buffer, nullptr);
  EXPECT_EQ(alloc.used(), 160u);

  Tensor* c = NewF32(ctx_, 16);  // 64 bytes at 192: ends exactly at 256
  ASSERT_TRUE(alloc.Alloc(*c).ok());
  EXPECT_EQ(c->data, static_cast<char*>(buffer->base()) + 192);
  EXPECT_EQ(alloc.used(), 256u);

  Tensor* d = NewF32(ctx_, 1);
  EXPECT_EQ(alloc.Alloc(*d).code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(TensorAllocatorTest, RejectsTensorThatAlreadyHasData) {
  std::unique_ptr<Buffer> buffer = NewBuffer(256);
  ASSERT_NE(buffer, nullptr);
  TensorAllocator alloc(*buffer);
  Tensor* a = NewF32(ctx_, 4);
  ASSERT_TRUE(alloc.Alloc(*a).ok());
  void* data = a->data;
  EXPECT_EQ(alloc.Alloc(*a).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->data, data);
  EXPECT_EQ(alloc.used(), 16u);
}

TEST_F(TensorAllocatorTest, ViewTakesSourceDataPlusOffsetAndNoSpace) {
  std::unique_ptr<Buffer> buffer = NewBuffer(256);
  ASSERT_NE(buffer, nullptr);
  TensorAllocator alloc(*buffer);
  Tensor* a = NewF32(ctx_, 16);
  Tensor* v = NewView(ctx_, a, 4, 8);

  EXPECT_EQ(alloc.Alloc(*v).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(v->data, nullptr);

  ASSERT_TRUE(alloc.Alloc(*a).ok());
  const size_t used = alloc.used();
  ASSERT_TRUE(alloc.Alloc(*v).ok());
  EXPECT_EQ(v->data, static_cast<char*>(a->data) + 8);
  EXPECT_EQ(v->buffer, buffer.get());
  EXPECT_EQ(alloc.used(), used);
}

TEST(InitViewTest, SetsDataAndBufferFromSource) {
  CpuDevice device{CpuDeviceOptions{}};
  Context ctx;
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      device.buffer_type().Alloc(128);
  ASSERT_TRUE(buffer.ok());
  Tensor* a = NewF32(ctx, 32);
  a->data = (*buffer)->base();
  a->buffer = buffer->get();
  Tensor* v = NewView(ctx, a, 8, 96);
  ASSERT_TRUE(InitView(*v).ok());
  EXPECT_EQ(v->data, static_cast<char*>(a->data) + 96);
  EXPECT_EQ(v->buffer, buffer->get());
}

TEST(InitViewTest, FailsWithoutSourceData) {
  Context ctx;
  Tensor* a = NewF32(ctx, 32);
  Tensor* v = NewView(ctx, a, 8, 0);
  EXPECT_EQ(InitView(*v).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(v->data, nullptr);
  EXPECT_EQ(InitView(*a).code(), absl::StatusCode::kFailedPrecondition);
}

// Whether [a, a + size_a) and [b, b + size_b) share a byte.
bool Overlap(const Tensor& a, const Tensor& b) {
  const uintptr_t a0 = Address(a.data), b0 = Address(b.data);
  return a0 < b0 + b.NumBytes() && b0 < a0 + a.NumBytes();
}

TEST_F(TensorAllocatorTest, AllocTensorsPlacesSourcesThenViews) {
  Tensor* a = NewF32(ctx_, 10);   // 40 bytes, padded to 64
  Tensor* b = NewF32(ctx_, 100);  // 400 bytes, padded to 448
  Tensor* c = NewF32(ctx_, 3);    // 12 bytes, padded to 64
  // A view of a view, listed before both its sources.
  Tensor* vb = NewView(ctx_, b, 50, 200);
  Tensor* vvb = NewView(ctx_, vb, 10, 40);
  // A tensor that already has data is left alone.
  std::unique_ptr<Buffer> other = NewBuffer(64);
  ASSERT_NE(other, nullptr);
  Tensor* placed = NewF32(ctx_, 4);
  placed->data = other->base();
  placed->buffer = other.get();

  std::vector<Tensor*> list = {vvb, a, vb, b, placed, c, a};
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device_.buffer_type(), list);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->size(), 64u + 448u + 64u);

  char* base = static_cast<char*>((*buffer)->base());
  for (Tensor* t : {a, b, c}) {
    ASSERT_NE(t->data, nullptr);
    EXPECT_EQ(t->buffer, buffer->get());
    EXPECT_EQ(Address(t->data) % kAlign, 0u);
    EXPECT_GE(static_cast<char*>(t->data), base);
    EXPECT_LE(static_cast<char*>(t->data) + t->NumBytes(),
              base + (*buffer)->size());
  }
  EXPECT_FALSE(Overlap(*a, *b));
  EXPECT_FALSE(Overlap(*a, *c));
  EXPECT_FALSE(Overlap(*b, *c));
  EXPECT_EQ(vb->data, static_cast<char*>(b->data) + 200);
  EXPECT_EQ(vvb->data, static_cast<char*>(b->data) + 240);
  EXPECT_EQ(vvb->buffer, buffer->get());
  EXPECT_EQ(placed->data, other->base());
  EXPECT_EQ(placed->buffer, other.get());
}

TEST_F(TensorAllocatorTest, AllocTensorsViewOfUnallocatedSourceFails) {
  Tensor* a = NewF32(ctx_, 16);
  Tensor* outside = NewF32(ctx_, 16);  // not in the list, no data
  Tensor* v = NewView(ctx_, outside, 4, 0);
  std::vector<Tensor*> list = {a, v};
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device_.buffer_type(), list);
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kFailedPrecondition);
  // Nothing keeps a pointer into the buffer that was given back.
  EXPECT_EQ(a->data, nullptr);
  EXPECT_EQ(a->buffer, nullptr);
  EXPECT_EQ(v->data, nullptr);
}

TEST(AllocTensorsTest, ResourceExhaustedFromBufferType) {
  CpuDeviceOptions options;
  options.memory_limit = 1024;
  CpuDevice device(options);
  Context ctx;
  Tensor* a = NewF32(ctx, 200);  // 800 bytes
  Tensor* b = NewF32(ctx, 200);
  std::vector<Tensor*> list = {a, b};
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device.buffer_type(), list);
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a->data, nullptr);
  EXPECT_EQ(b->data, nullptr);
  EXPECT_EQ(device.memory_used(), 0u);
}

TEST(AllocTensorsTest, NothingToPlaceGivesAnEmptyBuffer) {
  CpuDevice device{CpuDeviceOptions{}};
  std::vector<Tensor*> list;
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device.buffer_type(), list);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ((*buffer)->size(), 0u);
}

}  // namespace
}  // namespace tessera
