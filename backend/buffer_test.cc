#include "backend/buffer.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "graph/context.h"
#include "backend/alloc/tensor_allocator.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr size_t kMax = std::numeric_limits<size_t>::max();
constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kExhausted = absl::StatusCode::kResourceExhausted;

std::unique_ptr<Buffer> MustAlloc(BufferType& type, size_t size) {
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = type.Alloc(size);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  return buffer.ok() ? std::move(*buffer) : nullptr;
}

// A contiguous F32 tensor of `ne`, allocated alone in a new buffer.
struct AllocatedTensor {
  Tensor* t = nullptr;
  std::unique_ptr<Buffer> buffer;
};
AllocatedTensor MustAllocTensor(Context& ctx, BufferType& type,
                                std::initializer_list<int64_t> ne) {
  AllocatedTensor result;
  absl::StatusOr<Tensor*> t = ctx.NewTensor(Type::kF32, ne);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return result;
  result.t = *t;
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = AllocTensors(type, {*t});
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (buffer.ok()) result.buffer = std::move(*buffer);
  return result;
}

TEST(BufferTest, WriteReadMemsetRoundTrip) {
  CpuDevice device({});
  std::unique_ptr<Buffer> buffer = MustAlloc(device.buffer_type(), 100);
  ASSERT_NE(buffer, nullptr);
  EXPECT_EQ(buffer->size(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->base()) % 64, 0u);

  ASSERT_TRUE(buffer->Clear(0).ok());
  const uint8_t bytes[4] = {1, 2, 3, 4};
  ASSERT_TRUE(buffer->Write(96, bytes, 4).ok());
  ASSERT_TRUE(buffer->Memset(10, 0xAB, 3).ok());
  std::vector<uint8_t> all(100);
  ASSERT_TRUE(buffer->Read(0, all.data(), all.size()).ok());
  std::vector<uint8_t> want(100, 0);
  want[10] = want[11] = want[12] = 0xAB;
  want[96] = 1;
  want[97] = 2;
  want[98] = 3;
  want[99] = 4;
  EXPECT_EQ(all, want);
}

TEST(BufferTest, RejectsOutOfRangeByteRanges) {
  CpuDevice device({});
  std::unique_ptr<Buffer> buffer = MustAlloc(device.buffer_type(), 100);
  ASSERT_NE(buffer, nullptr);
  uint8_t bytes[16] = {};
  EXPECT_EQ(buffer->Write(90, bytes, 11).code(), kInvalid);
  EXPECT_EQ(buffer->Write(101, bytes, 0).code(), kInvalid);
  EXPECT_EQ(buffer->Read(99, bytes, 2).code(), kInvalid);
  EXPECT_EQ(buffer->Memset(0, 0, 101).code(), kInvalid);
  // offset + size wraps around: must not pass as a small range.
  EXPECT_EQ(buffer->Write(kMax, bytes, 2).code(), kInvalid);
  EXPECT_EQ(buffer->Read(8, bytes, kMax - 4).code(), kInvalid);
  EXPECT_EQ(buffer->Memset(kMax - 1, 0, 4).code(), kInvalid);
  // Null host pointers.
  EXPECT_EQ(buffer->Write(0, nullptr, 4).code(), kInvalid);
  EXPECT_EQ(buffer->Read(0, nullptr, 4).code(), kInvalid);
  // The exact end is fine.
  EXPECT_TRUE(buffer->Write(84, bytes, 16).ok());
  EXPECT_TRUE(buffer->Write(100, bytes, 0).ok());
}

TEST(BufferTest, EmptyBufferIsValid) {
  CpuDevice device({});
  std::unique_ptr<Buffer> buffer = MustAlloc(device.buffer_type(), 0);
  ASSERT_NE(buffer, nullptr);
  EXPECT_EQ(buffer->size(), 0u);
  EXPECT_NE(buffer->base(), nullptr);
  uint8_t byte = 0;
  EXPECT_TRUE(buffer->Write(0, &byte, 0).ok());
  EXPECT_EQ(buffer->Write(0, &byte, 1).code(), kInvalid);
}

TEST(BufferTest, TensorRangesAreRelativeToTheTensor) {
  CpuDevice device({});
  Context ctx;
  absl::StatusOr<Tensor*> a = ctx.NewTensor(Type::kF32, {3});
  absl::StatusOr<Tensor*> b = ctx.NewTensor(Type::kF32, {4, 2});
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device.buffer_type(), {*a, *b});
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Buffer& buf = **buffer;

  absl::StatusOr<size_t> offset = buf.OffsetOf(**b);
  ASSERT_TRUE(offset.ok()) << offset.status();
  EXPECT_EQ(*offset, static_cast<size_t>(static_cast<char*>((*b)->data) -
                                         static_cast<char*>(buf.base())));
  EXPECT_EQ(*offset % 64, 0u);  // placed at the buffer type's alignment

  const float values[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(buf.SetTensor(**b, values, 0, sizeof(values)).ok());
  ASSERT_TRUE(buf.MemsetTensor(**b, 0, 4 * sizeof(float), sizeof(float)).ok());
  float row1[4] = {};
  ASSERT_TRUE(buf.GetTensor(**b, row1, 4 * sizeof(float), sizeof(row1)).ok());
  EXPECT_EQ(row1[0], 0.0f);
  EXPECT_EQ(row1[1], 6.0f);
  EXPECT_EQ(row1[3], 8.0f);
  // The same bytes seen through the whole-buffer interface.
  float third = 0;
  ASSERT_TRUE(
      buf.Read(*offset + 2 * sizeof(float), &third, sizeof(third)).ok());
  EXPECT_EQ(third, 3.0f);
}

TEST(BufferTest, RejectsRangesOutsideTheTensor) {
  CpuDevice device({});
  Context ctx;
  AllocatedTensor a = MustAllocTensor(ctx, device.buffer_type(), {4});
  ASSERT_NE(a.buffer, nullptr);
  float values[8] = {};
  // The buffer has room past the tensor (64-byte alignment) but the tensor
  // has only 16 bytes.
  EXPECT_EQ(a.buffer->SetTensor(*a.t, values, 4, 16).code(), kInvalid);
  EXPECT_EQ(a.buffer->SetTensor(*a.t, values, 0, 17).code(), kInvalid);
  EXPECT_EQ(a.buffer->GetTensor(*a.t, values, 16, 1).code(), kInvalid);
  EXPECT_EQ(a.buffer->MemsetTensor(*a.t, 0, 17, 0).code(), kInvalid);
  EXPECT_EQ(a.buffer->SetTensor(*a.t, values, kMax, 2).code(), kInvalid);
  EXPECT_EQ(a.buffer->GetTensor(*a.t, values, 4, kMax).code(), kInvalid);
  EXPECT_TRUE(a.buffer->SetTensor(*a.t, values, 12, 4).ok());
}

TEST(BufferTest, RejectsTensorsNotInTheBuffer) {
  CpuDevice device({});
  Context ctx;
  AllocatedTensor a = MustAllocTensor(ctx, device.buffer_type(), {4});
  AllocatedTensor b = MustAllocTensor(ctx, device.buffer_type(), {4});
  ASSERT_NE(a.buffer, nullptr);
  ASSERT_NE(b.buffer, nullptr);
  float values[4] = {};
  EXPECT_EQ(a.buffer->SetTensor(*b.t, values, 0, 16).code(), kInvalid);
  EXPECT_EQ(a.buffer->GetTensor(*b.t, values, 0, 16).code(), kInvalid);
  EXPECT_EQ(a.buffer->OffsetOf(*b.t).status().code(), kInvalid);

  // Claims this buffer but points at another buffer's memory.
  Tensor* forged = ctx.NewTensorLike(*a.t);
  forged->buffer = a.buffer.get();
  forged->data = b.t->data;
  EXPECT_EQ(a.buffer->SetTensor(*forged, values, 0, 16).code(), kInvalid);

  // Starts inside the buffer but runs past its end.
  forged->data = static_cast<char*>(a.buffer->base()) + a.buffer->size() - 8;
  EXPECT_EQ(a.buffer->OffsetOf(*forged).status().code(), kInvalid);

  // Strides so large that the tensor's byte size overflows.
  forged->data = a.buffer->base();
  forged->ne[1] = 2;
  forged->nb[1] = kMax / 2 + 1;
  EXPECT_EQ(a.buffer->OffsetOf(*forged).status().code(), kInvalid);

  // Unallocated.
  Tensor* unallocated = ctx.NewTensorLike(*a.t);
  EXPECT_EQ(a.buffer->OffsetOf(*unallocated).status().code(), kInvalid);
}

TEST(BufferTest, CopyFromHostTensor) {
  CpuDevice device({});
  Context ctx;
  AllocatedTensor src = MustAllocTensor(ctx, device.buffer_type(), {2, 2});
  AllocatedTensor dst = MustAllocTensor(ctx, device.buffer_type(), {4});
  AllocatedTensor small = MustAllocTensor(ctx, device.buffer_type(), {3});
  ASSERT_NE(src.buffer, nullptr);
  ASSERT_NE(dst.buffer, nullptr);
  ASSERT_NE(small.buffer, nullptr);
  const float values[4] = {1.5f, -2, 3, 4};
  ASSERT_TRUE(src.buffer->SetTensor(*src.t, values, 0, sizeof(values)).ok());

  absl::StatusOr<bool> copied = dst.buffer->CopyFrom(*src.t, *dst.t);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_TRUE(*copied);
  float out[4] = {};
  ASSERT_TRUE(dst.buffer->GetTensor(*dst.t, out, 0, sizeof(out)).ok());
  EXPECT_EQ(std::memcmp(out, values, sizeof(out)), 0);

  EXPECT_EQ(small.buffer->CopyFrom(*src.t, *small.t).status().code(), kInvalid);
  // The destination must be in the buffer asked to copy.
  EXPECT_EQ(small.buffer->CopyFrom(*src.t, *dst.t).status().code(), kInvalid);
}

TEST(BufferTest, MemoryLimitIsResourceExhaustedAndMemoryReturns) {
  CpuDevice device({.name = "cpu0", .n_threads = 1, .memory_limit = 1000});
  BufferType& type = device.buffer_type();
  EXPECT_EQ(device.Props().memory_total, 1000u);

  absl::StatusOr<std::unique_ptr<Buffer>> too_big = type.Alloc(1001);
  ASSERT_EQ(too_big.status().code(), kExhausted);
  EXPECT_NE(too_big.status().message().find("1001"), std::string::npos)
      << too_big.status();
  EXPECT_NE(too_big.status().message().find("1000"), std::string::npos)
      << too_big.status();

  std::unique_ptr<Buffer> first = MustAlloc(type, 600);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(device.memory_used(), 600u);
  EXPECT_EQ(device.Props().memory_free, 400u);

  absl::StatusOr<std::unique_ptr<Buffer>> second = type.Alloc(401);
  ASSERT_EQ(second.status().code(), kExhausted);
  EXPECT_NE(second.status().message().find("401"), std::string::npos);
  EXPECT_NE(second.status().message().find("400"), std::string::npos);

  std::unique_ptr<Buffer> exact = MustAlloc(type, 400);
  ASSERT_NE(exact, nullptr);
  EXPECT_EQ(device.Props().memory_free, 0u);

  first.reset();
  exact.reset();
  EXPECT_EQ(device.memory_used(), 0u);
  EXPECT_EQ(device.Props().memory_free, 1000u);
  EXPECT_NE(MustAlloc(type, 1000), nullptr);
}

TEST(BufferTest, HugeAllocationsFailWithoutAborting) {
  CpuDevice device({});
  EXPECT_EQ(device.buffer_type().Alloc(kMax).status().code(), kExhausted);
  EXPECT_EQ(device.buffer_type().Alloc(kMax - 10).status().code(), kExhausted);
  EXPECT_EQ(device.memory_used(), 0u);
  // A device whose limit exceeds what the system can give.
  CpuDevice greedy({.name = "greedy", .n_threads = 1, .memory_limit = kMax});
  EXPECT_EQ(greedy.buffer_type().Alloc(kMax / 2).status().code(), kExhausted);
  EXPECT_EQ(greedy.memory_used(), 0u);
}

TEST(BufferTest, DevicesAccountMemorySeparately) {
  CpuDevice a({.name = "a", .n_threads = 1, .memory_limit = 100});
  CpuDevice b({.name = "b", .n_threads = 1, .memory_limit = 100});
  std::unique_ptr<Buffer> on_a = MustAlloc(a.buffer_type(), 100);
  ASSERT_NE(on_a, nullptr);
  EXPECT_EQ(b.memory_used(), 0u);
  EXPECT_NE(MustAlloc(b.buffer_type(), 100), nullptr);
  EXPECT_EQ(a.buffer_type().Alloc(1).status().code(), kExhausted);
}

}  // namespace
}  // namespace tessera
