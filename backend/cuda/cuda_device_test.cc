// Tests of the CUDA device. Without a GPU (or driver) every test but the
// registry one skips with a message; on a GPU machine they check memory,
// streams, events, errors, CUDA graph capture and copies between GPUs. The
// ops are checked against the reference kernels by
// //tests/conformance:cuda_conformance_test.

#include "backend/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cuda/cuda_registry.h"
#include "backend/cuda/cuda_stream.h"
#include "backend/registry.h"
#include "backend/ticket_event.h"
#include "gmock/gmock.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "backend/alloc/tensor_allocator.h"
#include "graph/type.h"
#include "backend/testing/gate_event.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;

constexpr char kNoGpu[] =
    "no CUDA device on this machine (no GPU or no driver): the CUDA device "
    "tests need one";

// Deterministic values in [lo, hi).
std::vector<float> Pattern(size_t n, uint32_t seed, float lo = -1.0f,
                           float hi = 1.0f) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 12345u;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<float>(s >> 8) /
                 static_cast<float>(1u << 24);
  }
  return v;
}

// The first GPU, or a skip.
class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<std::unique_ptr<CudaDevice>>> devices =
        CreateCudaDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    if (devices->empty()) GTEST_SKIP() << kNoGpu;
    devices_ = std::move(*devices);
    device_ = devices_[0].get();
  }

  std::unique_ptr<Stream> NewStream() {
    absl::StatusOr<std::unique_ptr<Stream>> stream = device_->CreateStream();
    EXPECT_TRUE(stream.ok()) << stream.status();
    return stream.ok() ? std::move(*stream) : nullptr;
  }

  std::unique_ptr<Event> NewEvent() {
    absl::StatusOr<std::unique_ptr<Event>> event = device_->CreateEvent();
    EXPECT_TRUE(event.ok()) << event.status();
    return event.ok() ? std::move(*event) : nullptr;
  }

  std::vector<std::unique_ptr<CudaDevice>> devices_;
  CudaDevice* device_ = nullptr;
};

TEST(CudaRegistryTest, AddsOneDevicePerGpuAndNoneWithoutOne) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  Registry registry;
  absl::Status s = AddCudaDevices(registry);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(registry.devices().size(), static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(registry.devices()[i]->name(), absl::StrCat("cuda", i));
    EXPECT_EQ(registry.devices()[i]->Props().type, DeviceType::kGpu);
  }
}

TEST_F(CudaDeviceTest, PropsReportRealMemoryAndCaps) {
  const DeviceProps props = device_->Props();
  EXPECT_EQ(props.name, "cuda0");
  EXPECT_EQ(props.type, DeviceType::kGpu);
  EXPECT_THAT(props.description, HasSubstr("sm_"));
  size_t free = 0;
  size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(props.memory_total, total);
  EXPECT_GT(props.memory_free, 0u);
  EXPECT_LE(props.memory_free, props.memory_total);
  EXPECT_TRUE(props.caps.async);
  EXPECT_TRUE(props.caps.events);
  EXPECT_TRUE(props.caps.host_buffer);
  EXPECT_TRUE(props.caps.buffer_from_host_ptr);
  ASSERT_NE(device_->host_buffer_type(), nullptr);
  EXPECT_TRUE(device_->host_buffer_type()->is_host());
  EXPECT_FALSE(device_->buffer_type().is_host());
  EXPECT_TRUE(device_->SupportsBufferType(device_->buffer_type()));
  EXPECT_FALSE(device_->SupportsBufferType(*device_->host_buffer_type()));
  EXPECT_TRUE(device_->health().ok());
}

TEST_F(CudaDeviceTest, BufferWriteReadMemsetAndCopyFrom) {
  Context ctx;
  absl::StatusOr<Tensor*> a = ctx.NewTensor(Type::kF32, {1000});
  absl::StatusOr<Tensor*> b = ctx.NewTensor(Type::kF32, {1000});
  absl::StatusOr<Tensor*> h = ctx.NewTensor(Type::kF32, {1000});
  ASSERT_TRUE(a.ok() && b.ok() && h.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> ba =
      AllocTensors(device_->buffer_type(), {*a});
  absl::StatusOr<std::unique_ptr<Buffer>> bb =
      AllocTensors(device_->buffer_type(), {*b});
  absl::StatusOr<std::unique_ptr<Buffer>> bh =
      AllocTensors(*device_->host_buffer_type(), {*h});
  ASSERT_TRUE(ba.ok() && bb.ok() && bh.ok());

  const std::vector<float> in = Pattern(1000, 2);
  ASSERT_TRUE((*ba)->SetTensor(**a, in.data(), 0, 4000).ok());
  absl::StatusOr<bool> copied = (*bb)->CopyFrom(**a, **b);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_TRUE(*copied);
  std::vector<float> out(1000);
  ASSERT_TRUE((*bb)->GetTensor(**b, out.data(), 0, 4000).ok());
  EXPECT_EQ(in, out);

  ASSERT_TRUE((*bb)->MemsetTensor(**b, 0, 40, 400).ok());
  ASSERT_TRUE((*bb)->GetTensor(**b, out.data(), 0, 4000).ok());
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(out[i], i >= 10 && i < 110 ? 0.0f : in[i]) << i;
  }

  // From pinned host memory, which the CPU writes directly.
  const std::vector<float> host = Pattern(1000, 3);
  std::memcpy((*h)->data, host.data(), 4000);
  copied = (*bb)->CopyFrom(**h, **b);
  ASSERT_TRUE(copied.ok() && *copied);
  ASSERT_TRUE((*bb)->GetTensor(**b, out.data(), 0, 4000).ok());
  EXPECT_EQ(host, out);
}

TEST_F(CudaDeviceTest, AsyncSetGetRoundTripThroughPinnedMemory) {
  constexpr int64_t kN = int64_t{1} << 20;
  constexpr size_t kBytes = kN * sizeof(float);
  Context ctx;
  absl::StatusOr<Tensor*> t = ctx.NewTensor(Type::kF32, {kN});
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device_->buffer_type(), {*t});
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  absl::StatusOr<std::unique_ptr<Buffer>> in =
      device_->host_buffer_type()->Alloc(kBytes);
  absl::StatusOr<std::unique_ptr<Buffer>> out =
      device_->host_buffer_type()->Alloc(kBytes);
  ASSERT_TRUE(in.ok() && out.ok());
  const std::vector<float> values = Pattern(kN, 4);
  std::memcpy((*in)->base(), values.data(), kBytes);

  std::unique_ptr<Stream> stream = NewStream();
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->SetTensorAsync(**t, (*in)->base(), 0, kBytes).ok());
  // A partial overwrite from pageable memory, in order after the first.
  const float patch[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  ASSERT_TRUE(stream->SetTensorAsync(**t, patch, 64, sizeof(patch)).ok());
  ASSERT_TRUE(stream->GetTensorAsync(**t, (*out)->base(), 0, kBytes).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  std::vector<float> expected = values;
  std::memcpy(expected.data() + 16, patch, sizeof(patch));
  EXPECT_EQ(std::memcmp((*out)->base(), expected.data(), kBytes), 0);

  EXPECT_EQ(stream->SetTensorAsync(**t, patch, kBytes - 4, 8).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaDeviceTest, BufferFromHostPtrWrapsAndPinsMemory) {
  // Memory at the host buffer type's alignment, where TensorAllocator can
  // place a tensor at offset 0.
  const std::vector<float> pattern = Pattern(4096, 5);
  const size_t bytes = pattern.size() * sizeof(float);
  std::unique_ptr<void, decltype(&std::free)> memory(
      std::aligned_alloc(device_->host_buffer_type()->alignment(), bytes),
      &std::free);
  ASSERT_NE(memory, nullptr);
  std::memcpy(memory.get(), pattern.data(), bytes);
  absl::StatusOr<std::unique_ptr<Buffer>> wrapped =
      device_->BufferFromHostPtr(memory.get(), bytes);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_TRUE((*wrapped)->type().is_host());
  EXPECT_EQ((*wrapped)->base(), memory.get());
  // Registering the same memory twice is refused.
  EXPECT_EQ(device_->BufferFromHostPtr(memory.get(), 4096).status().code(),
            absl::StatusCode::kInvalidArgument);

  Context ctx;
  absl::StatusOr<Tensor*> src = ctx.NewTensor(Type::kF32, {4096});
  absl::StatusOr<Tensor*> dst = ctx.NewTensor(Type::kF32, {4096});
  ASSERT_TRUE(src.ok() && dst.ok());
  TensorAllocator host_alloc(**wrapped);
  ASSERT_TRUE(host_alloc.Alloc(**src).ok());
  absl::StatusOr<std::unique_ptr<Buffer>> device_buffer =
      AllocTensors(device_->buffer_type(), {*dst});
  ASSERT_TRUE(device_buffer.ok());
  std::unique_ptr<Stream> stream = NewStream();
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->CopyTensorAsync(**src, **dst).ok());
  std::vector<float> out(4096);
  ASSERT_TRUE(stream->GetTensorAsync(**dst, out.data(), 0, out.size() * 4).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(out, pattern);
}

// A CPU device's buffer is pageable: cudaMemcpyAsync would read it when
// queued, not in stream order, so the copy is UNIMPLEMENTED (the scheduler
// then copies synchronously), while pinned sources are queued (above).
TEST_F(CudaDeviceTest, CopyFromPageableHostMemoryIsUnimplemented) {
  CpuDevice cpu(CpuDeviceOptions{});
  Context ctx;
  absl::StatusOr<Tensor*> src = ctx.NewTensor(Type::kF32, {256});
  absl::StatusOr<Tensor*> dst = ctx.NewTensor(Type::kF32, {256});
  ASSERT_TRUE(src.ok() && dst.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> host =
      AllocTensors(cpu.buffer_type(), {*src});
  absl::StatusOr<std::unique_ptr<Buffer>> device_buffer =
      AllocTensors(device_->buffer_type(), {*dst});
  ASSERT_TRUE(host.ok() && device_buffer.ok());
  std::unique_ptr<Stream> stream = NewStream();
  ASSERT_NE(stream, nullptr);
  const absl::Status s = stream->CopyTensorAsync(**src, **dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_TRUE(stream->Synchronize().ok());
}

// y = 2x + 1 on stream 1, then z = 3y on stream 2 after an event: z must see
// all of y.
TEST_F(CudaDeviceTest, EventOrdersWorkAcrossTwoStreams) {
  constexpr int64_t kN = int64_t{1} << 22;
  Context ctx;
  absl::StatusOr<Tensor*> x = ctx.NewTensor(Type::kF32, {kN});
  ASSERT_TRUE(x.ok());
  absl::StatusOr<Tensor*> y = Scale(ctx, *x, 2.0f, 1.0f);
  ASSERT_TRUE(y.ok());
  absl::StatusOr<Tensor*> z = Scale(ctx, *y, 3.0f);
  ASSERT_TRUE(z.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device_->buffer_type(), {*x, *y, *z});
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Graph first;
  ASSERT_TRUE(first.Expand(*y).ok());
  Graph second;
  second.AddNode(*z);

  std::unique_ptr<Stream> s1 = NewStream();
  std::unique_ptr<Stream> s2 = NewStream();
  std::unique_ptr<Event> event = NewEvent();
  ASSERT_TRUE(s1 && s2 && event);
  EXPECT_TRUE(event->IsDone());  // never recorded
  EXPECT_TRUE(event->Synchronize().ok());

  const std::vector<float> in = Pattern(kN, 6);
  std::vector<float> out(kN);
  ASSERT_TRUE(s1->SetTensorAsync(**x, in.data(), 0, kN * 4).ok());
  ASSERT_TRUE(s1->ComputeAsync(first).ok());
  ASSERT_TRUE(s1->RecordEvent(*event).ok());
  ASSERT_TRUE(s2->WaitEvent(*event).ok());
  ASSERT_TRUE(s2->ComputeAsync(second).ok());
  ASSERT_TRUE(s2->GetTensorAsync(**z, out.data(), 0, kN * 4).ok());
  ASSERT_TRUE(s2->Synchronize().ok());
  EXPECT_TRUE(event->IsDone());
  EXPECT_TRUE(event->Synchronize().ok());
  for (int64_t i = 0; i < kN; i += 4099) {
    ASSERT_FLOAT_EQ(out[i], 3.0f * (2.0f * in[i] + 1.0f)) << i;
  }
  ASSERT_TRUE(s1->Synchronize().ok());
}

TEST_F(CudaDeviceTest, WaitsForAnEventOfAnotherKind) {
  Context ctx;
  absl::StatusOr<Tensor*> t = ctx.NewTensor(Type::kF32, {256});
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device_->buffer_type(), {*t});
  ASSERT_TRUE(buffer.ok());
  testing::GateEvent gate(*device_, absl::OkStatus());
  std::unique_ptr<Stream> stream = NewStream();
  std::unique_ptr<Event> after = NewEvent();
  ASSERT_TRUE(stream && after);
  const std::vector<float> in = Pattern(256, 7);
  std::vector<float> out(256);
  ASSERT_TRUE(stream->WaitEvent(gate).ok());
  ASSERT_TRUE(stream->SetTensorAsync(**t, in.data(), 0, 1024).ok());
  ASSERT_TRUE(stream->RecordEvent(*after).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(after->IsDone());
  gate.Open();
  ASSERT_TRUE(after->Synchronize().ok());
  ASSERT_TRUE(stream->GetTensorAsync(**t, out.data(), 0, 1024).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(in, out);
}

TEST_F(CudaDeviceTest, FailedEventOfAnotherKindFailsTheStream) {
  testing::GateEvent gate(*device_, absl::InternalError("the gate broke"));
  gate.Open();
  std::unique_ptr<Stream> stream = NewStream();
  std::unique_ptr<Event> after = NewEvent();
  ASSERT_TRUE(stream && after);
  ASSERT_TRUE(stream->WaitEvent(gate).ok());
  ASSERT_TRUE(stream->RecordEvent(*after).ok());
  absl::Status event_status = after->Synchronize();
  EXPECT_EQ(event_status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(event_status.message(), HasSubstr("the gate broke"));
  absl::Status s = stream->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("the gate broke"));
  EXPECT_TRUE(device_->health().ok());
}

// A CPU-style event (TicketEvent) is waited for as recorded when the wait is
// queued: recording it again later does not hold the stream back.
TEST_F(CudaDeviceTest, WaitsForTheTicketEventRecordingOfTheWaitOnly) {
  TicketEvent ticket_event(*device_);
  const uint64_t first = ticket_event.Record();
  std::unique_ptr<Stream> stream = NewStream();
  std::unique_ptr<Event> after = NewEvent();
  ASSERT_TRUE(stream && after);
  ASSERT_TRUE(stream->WaitEvent(ticket_event).ok());
  ASSERT_TRUE(stream->RecordEvent(*after).ok());
  const uint64_t second = ticket_event.Record();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(after->IsDone());
  ticket_event.Complete(first, absl::OkStatus());
  ASSERT_TRUE(after->Synchronize().ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  ticket_event.Complete(second, absl::OkStatus());

  // Never recorded: complete, nothing to wait for.
  TicketEvent unrecorded(*device_);
  ASSERT_TRUE(stream->WaitEvent(unrecorded).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
}

TEST_F(CudaDeviceTest, RowIndexOutOfRangeFailsStreamAndLaterEventsOnly) {
  Context ctx;
  absl::StatusOr<Tensor*> a = ctx.NewTensor(Type::kF32, {8, 4});
  absl::StatusOr<Tensor*> idx = ctx.NewTensor(Type::kI32, {2});
  ASSERT_TRUE(a.ok() && idx.ok());
  absl::StatusOr<Tensor*> rows = GetRows(ctx, *a, *idx);
  ASSERT_TRUE(rows.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device_->buffer_type(), {*a, *idx, *rows});
  ASSERT_TRUE(buffer.ok());
  Graph graph;
  ASSERT_TRUE(graph.Expand(*rows).ok());

  std::unique_ptr<Stream> stream = NewStream();
  std::unique_ptr<Event> before = NewEvent();
  std::unique_ptr<Event> after = NewEvent();
  ASSERT_TRUE(stream && before && after);
  const std::vector<float> values = Pattern(32, 8);
  const int32_t bad[2] = {1, 4};  // a has 4 rows
  ASSERT_TRUE(stream->SetTensorAsync(**a, values.data(), 0, 128).ok());
  ASSERT_TRUE(stream->SetTensorAsync(**idx, bad, 0, sizeof(bad)).ok());
  ASSERT_TRUE(stream->RecordEvent(*before).ok());
  ASSERT_TRUE(stream->ComputeAsync(graph).ok());
  ASSERT_TRUE(stream->RecordEvent(*after).ok());
  EXPECT_TRUE(before->Synchronize().ok());
  absl::Status event_status = after->Synchronize();
  EXPECT_EQ(event_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(event_status.message(), HasSubstr("row index 4"));
  absl::Status s = stream->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("GET_ROWS"));
  // Sticky on this stream; the device and its other streams are fine.
  EXPECT_FALSE(stream->Synchronize().ok());
  EXPECT_TRUE(device_->health().ok());
  std::unique_ptr<Stream> fresh = NewStream();
  ASSERT_NE(fresh, nullptr);
  const int32_t good[2] = {3, 0};
  std::vector<float> out(16);
  ASSERT_TRUE(fresh->SetTensorAsync(**idx, good, 0, sizeof(good)).ok());
  ASSERT_TRUE(fresh->ComputeAsync(graph).ok());
  ASSERT_TRUE(fresh->GetTensorAsync(**rows, out.data(), 0, 64).ok());
  ASSERT_TRUE(fresh->Synchronize().ok());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(out[i], values[24 + i]);
    EXPECT_EQ(out[8 + i], values[i]);
  }
}

TEST_F(CudaDeviceTest, RejectsTensorsOutsideItsMemoryAtQueueTime) {
  Context ctx;
  absl::StatusOr<Tensor*> a = ctx.NewTensor(Type::kF32, {16});
  ASSERT_TRUE(a.ok());
  absl::StatusOr<Tensor*> b = Scale(ctx, *a, 2.0f);
  ASSERT_TRUE(b.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> host =
      AllocTensors(*device_->host_buffer_type(), {*a, *b});
  ASSERT_TRUE(host.ok());
  Graph graph;
  ASSERT_TRUE(graph.Expand(*b).ok());
  std::unique_ptr<Stream> stream = NewStream();
  ASSERT_NE(stream, nullptr);
  absl::Status s = stream->ComputeAsync(graph);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cuda0"));
  EXPECT_TRUE(stream->Synchronize().ok());
}

// y = (x + w) * 2 and m = W x (F16 weights, through cuBLAS), computed five
// times with new x: the third run on is a captured CUDA graph replay.
TEST_F(CudaDeviceTest, RepeatedGraphIsCapturedAndStaysCorrect) {
  constexpr int64_t kK = 64;
  constexpr int64_t kM = 32;
  constexpr int64_t kN = 8;
  Context ctx;
  absl::StatusOr<Tensor*> x = ctx.NewTensor(Type::kF32, {kK, kN});
  absl::StatusOr<Tensor*> w = ctx.NewTensor(Type::kF32, {kK, kN});
  absl::StatusOr<Tensor*> wm = ctx.NewTensor(Type::kF16, {kK, kM});
  ASSERT_TRUE(x.ok() && w.ok() && wm.ok());
  absl::StatusOr<Tensor*> sum = Add(ctx, *x, *w);
  ASSERT_TRUE(sum.ok());
  absl::StatusOr<Tensor*> y = Scale(ctx, *sum, 2.0f);
  absl::StatusOr<Tensor*> m = MulMat(ctx, *wm, *x);
  ASSERT_TRUE(y.ok() && m.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      AllocTensors(device_->buffer_type(), {*x, *w, *wm, *sum, *y, *m});
  ASSERT_TRUE(buffer.ok());
  Graph graph;
  ASSERT_TRUE(graph.Expand(*y).ok());
  ASSERT_TRUE(graph.Expand(*m).ok());

  const std::vector<float> wv = Pattern(kK * kN, 9);
  std::vector<uint16_t> wmv(kK * kM);
  std::vector<float> wm_rounded(kK * kM);
  const std::vector<float> wm_f = Pattern(kK * kM, 10);
  for (size_t i = 0; i < wmv.size(); ++i) {
    wmv[i] = Fp32ToFp16(wm_f[i]);
    wm_rounded[i] = Fp16ToFp32(wmv[i]);
  }
  std::unique_ptr<Stream> stream = NewStream();
  ASSERT_NE(stream, nullptr);
  auto* cuda_stream = dynamic_cast<CudaStream*>(stream.get());
  ASSERT_NE(cuda_stream, nullptr);
  ASSERT_TRUE(stream->SetTensorAsync(**w, wv.data(), 0, wv.size() * 4).ok());
  ASSERT_TRUE(stream->SetTensorAsync(**wm, wmv.data(), 0, wmv.size() * 2).ok());
  for (int run = 0; run < 5; ++run) {
    const std::vector<float> xv = Pattern(kK * kN, 100 + run);
    std::vector<float> yv(kK * kN);
    std::vector<float> mv(kM * kN);
    ASSERT_TRUE(stream->SetTensorAsync(**x, xv.data(), 0, xv.size() * 4).ok());
    ASSERT_TRUE(stream->ComputeAsync(graph).ok());
    ASSERT_TRUE(stream->GetTensorAsync(**y, yv.data(), 0, yv.size() * 4).ok());
    ASSERT_TRUE(stream->GetTensorAsync(**m, mv.data(), 0, mv.size() * 4).ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    EXPECT_EQ(cuda_stream->has_captured_graph(), run >= 2) << run;
    for (size_t i = 0; i < yv.size(); ++i) {
      ASSERT_FLOAT_EQ(yv[i], (xv[i] + wv[i]) * 2.0f) << run << " " << i;
    }
    for (int64_t j = 0; j < kN; ++j) {
      for (int64_t i = 0; i < kM; ++i) {
        // cuBLAS multiplies F16 values: x rounds to F16 too.
        double dot = 0.0;
        for (int64_t k = 0; k < kK; ++k) {
          dot += static_cast<double>(wm_rounded[i * kK + k]) *
                 Fp16ToFp32(Fp32ToFp16(xv[j * kK + k]));
        }
        ASSERT_NEAR(mv[j * kM + i], dot, 1e-3) << run << " " << i << " " << j;
      }
    }
  }
}

// CPY from F32 and SET_ROWS into every quantized type the device writes
// give the reference quantizers' bytes exactly (graph/type.h's
// RowFromFloat), for random blocks and for the blocks where a quantizer
// chooses: all zero, constant (an affine block of range 0), the largest
// magnitude negative or repeated, and values spanning 2^-20 to 2^10.
TEST_F(CudaDeviceTest, QuantizingWritesAreTheReferenceBytes) {
  constexpr int64_t kBlocks = 12;
  constexpr int64_t kN = 32 * kBlocks;
  std::vector<float> x = Pattern(2 * kN, 21);
  float* special = x.data();                       // row 0, block 0 on
  for (int j = 0; j < 32; ++j) special[j] = 0.0f;  // all zero
  for (int j = 32; j < 64; ++j) special[j] = -0.375f;  // constant
  special[64 + 7] = -3.0f;                             // negative largest
  special[96 + 3] = 2.5f;                              // repeated largest
  special[96 + 30] = 2.5f;
  special[96 + 11] = -2.5f;
  for (int j = 128; j < 160; ++j) {
    special[j] = std::ldexp(j % 2 ? -1.0f : 1.0f, (j % 31) - 20);
  }
  for (Type type :
       {Type::kQ8_0, Type::kQ4_0, Type::kQ4_1, Type::kQ5_0, Type::kQ5_1}) {
    SCOPED_TRACE(TypeName(type));
    const size_t row_bytes = RowSize(type, kN);
    std::vector<uint8_t> want(2 * row_bytes);
    RowFromFloat(type, x.data(), want.data(), kN);
    RowFromFloat(type, x.data() + kN, want.data() + row_bytes, kN);

    Context ctx;
    absl::StatusOr<Tensor*> src = ctx.NewTensor(Type::kF32, {kN, 2});
    absl::StatusOr<Tensor*> copy = ctx.NewTensor(type, {kN, 2});
    absl::StatusOr<Tensor*> table = ctx.NewTensor(type, {kN, 4});
    absl::StatusOr<Tensor*> idx = ctx.NewTensor(Type::kI64, {2});
    ASSERT_TRUE(src.ok() && copy.ok() && table.ok() && idx.ok());
    absl::StatusOr<Tensor*> cpy = Cpy(ctx, *src, *copy);
    absl::StatusOr<Tensor*> set = SetRows(ctx, *table, *src, *idx);
    ASSERT_TRUE(cpy.ok() && set.ok());
    absl::StatusOr<std::unique_ptr<Buffer>> buffer = AllocTensors(
        device_->buffer_type(), {*src, *copy, *table, *idx, *cpy, *set});
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    Graph graph;
    ASSERT_TRUE(graph.Expand(*cpy).ok());
    ASSERT_TRUE(graph.Expand(*set).ok());

    std::unique_ptr<Stream> stream = NewStream();
    ASSERT_NE(stream, nullptr);
    const int64_t rows[2] = {3, 1};
    ASSERT_TRUE(
        stream->SetTensorAsync(**src, x.data(), 0, x.size() * 4).ok());
    ASSERT_TRUE(stream->SetTensorAsync(**idx, rows, 0, sizeof(rows)).ok());
    ASSERT_TRUE(stream->ComputeAsync(graph).ok());
    std::vector<uint8_t> copied(2 * row_bytes);
    std::vector<uint8_t> set_rows(4 * row_bytes);
    ASSERT_TRUE(
        stream->GetTensorAsync(**copy, copied.data(), 0, copied.size()).ok());
    ASSERT_TRUE(
        stream->GetTensorAsync(**table, set_rows.data(), 0, set_rows.size())
            .ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    EXPECT_EQ(copied, want);
    const std::vector<uint8_t> row3(set_rows.begin() + 3 * row_bytes,
                                    set_rows.end());
    const std::vector<uint8_t> row1(set_rows.begin() + row_bytes,
                                    set_rows.begin() + 2 * row_bytes);
    EXPECT_EQ(row3, std::vector<uint8_t>(want.begin(),
                                         want.begin() + row_bytes));
    EXPECT_EQ(row1, std::vector<uint8_t>(want.begin() + row_bytes,
                                         want.end()));
  }
}

TEST_F(CudaDeviceTest, CopiesBetweenGpus) {
  if (devices_.size() < 2) GTEST_SKIP() << "needs two GPUs";
  CudaDevice& other = *devices_[1];
  Context ctx;
  absl::StatusOr<Tensor*> src = ctx.NewTensor(Type::kF32, {1 << 16});
  absl::StatusOr<Tensor*> dst = ctx.NewTensor(Type::kF32, {1 << 16});
  ASSERT_TRUE(src.ok() && dst.ok());
  absl::StatusOr<std::unique_ptr<Buffer>> bs =
      AllocTensors(other.buffer_type(), {*src});
  absl::StatusOr<std::unique_ptr<Buffer>> bd =
      AllocTensors(device_->buffer_type(), {*dst});
  ASSERT_TRUE(bs.ok() && bd.ok());
  const std::vector<float> in = Pattern(1 << 16, 11);
  ASSERT_TRUE((*bs)->SetTensor(**src, in.data(), 0, in.size() * 4).ok());
  std::unique_ptr<Stream> stream = NewStream();
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->CopyTensorAsync(**src, **dst).ok());
  std::vector<float> out(in.size());
  ASSERT_TRUE(stream->GetTensorAsync(**dst, out.data(), 0, out.size() * 4).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(in, out);
}

}  // namespace
}  // namespace tessera
