#include "backend/comm/nccl_communicator.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/buffer.h"
#include "backend/comm/native_cuda_stream.h"
#include "backend/cuda/cuda_device.h"
#include "backend/device.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

absl::Status CudaStatus(cudaError_t error) {
  return error == cudaSuccess ? absl::OkStatus()
                              : absl::InternalError(cudaGetErrorString(error));
}

// Test fakes over the CUDA runtime alone, so that this test needs no CUDA
// backend: cudaMalloc'ed buffers and a Stream over a raw cudaStream_t that
// exposes it as a NativeCudaStream.
class RawCudaBuffer final : public Buffer {
 public:
  RawCudaBuffer(BufferType& type, void* data, size_t size)
      : Buffer(type, size), data_(data) {}
  ~RawCudaBuffer() override { cudaFree(data_); }
  void* base() override { return data_; }

 protected:
  absl::Status DoWrite(size_t offset, const void* data, size_t size) override {
    return CudaStatus(cudaMemcpy(static_cast<char*>(data_) + offset, data, size,
                                 cudaMemcpyHostToDevice));
  }
  absl::Status DoRead(size_t offset, void* data, size_t size) override {
    return CudaStatus(cudaMemcpy(data, static_cast<char*>(data_) + offset, size,
                                 cudaMemcpyDeviceToHost));
  }
  absl::Status DoMemset(size_t offset, uint8_t value, size_t size) override {
    return CudaStatus(
        cudaMemset(static_cast<char*>(data_) + offset, value, size));
  }

 private:
  void* const data_;
};

class RawCudaBufferType final : public BufferType {
 public:
  explicit RawCudaBufferType(Device& device) : device_(device) {}
  std::string_view name() const override { return "raw_cuda"; }
  Device& device() override { return device_; }
  absl::StatusOr<std::unique_ptr<Buffer>> Alloc(size_t size) override {
    void* data = nullptr;
    if (cudaMalloc(&data, size == 0 ? 1 : size) != cudaSuccess) {
      return absl::ResourceExhaustedError("cudaMalloc");
    }
    return std::unique_ptr<Buffer>(new RawCudaBuffer(*this, data, size));
  }
  size_t alignment() const override { return 256; }
  size_t max_size() const override {
    return std::numeric_limits<size_t>::max();
  }
  bool is_host() const override { return false; }

 private:
  Device& device_;
};

class RawCudaDevice final : public Device {
 public:
  RawCudaDevice() : name_("cuda0"), type_(*this) {}
  const std::string& name() const override { return name_; }
  DeviceProps Props() override {
    return {.name = name_,
            .description = "raw CUDA device 0",
            .type = DeviceType::kGpu};
  }
  BufferType& buffer_type() override { return type_; }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream() override {
    return absl::UnimplementedError("test fake");
  }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return absl::UnimplementedError("test fake");
  }
  bool SupportsOp(const Tensor&) const override { return false; }
  bool SupportsBufferType(const BufferType& type) const override {
    return &type == &type_;
  }

 private:
  const std::string name_;
  RawCudaBufferType type_;
};

class RawCudaStream final : public Stream, public NativeCudaStream {
 public:
  explicit RawCudaStream(Device& device) : device_(device) {
    cudaStreamCreate(&stream_);
  }
  ~RawCudaStream() override { cudaStreamDestroy(stream_); }

  Device& device() override { return device_; }
  absl::Status SetTensorAsync(Tensor&, const void*, size_t, size_t) override {
    return absl::UnimplementedError("test fake");
  }
  absl::Status GetTensorAsync(const Tensor&, void*, size_t, size_t) override {
    return absl::UnimplementedError("test fake");
  }
  absl::Status CopyTensorAsync(const Tensor&, Tensor&) override {
    return absl::UnimplementedError("test fake");
  }
  absl::Status ComputeAsync(const Graph&) override {
    return absl::UnimplementedError("test fake");
  }
  absl::Status Synchronize() override {
    if (status_.ok()) status_ = CudaStatus(cudaStreamSynchronize(stream_));
    return status_;
  }
  absl::Status RecordEvent(Event&) override {
    return absl::UnimplementedError("test fake");
  }
  absl::Status WaitEvent(Event&) override {
    return absl::UnimplementedError("test fake");
  }

  CUstream_st* cuda_stream() override { return stream_; }
  int cuda_ordinal() const override { return 0; }
  absl::Status status() override { return status_; }
  void Fail(absl::Status status) override {
    if (status_.ok()) status_ = std::move(status);
  }

 private:
  Device& device_;
  cudaStream_t stream_ = nullptr;
  absl::Status status_;
};

TEST(NcclCommunicatorTest, CreateRejectsBadArgumentsWithoutTouchingNccl) {
  RawCudaDevice device;
  EXPECT_EQ(NcclCommunicator::Create({}, {}).status().code(), kInvalid);
  EXPECT_EQ(NcclCommunicator::Create({&device}, {0, 1}).status().code(),
            kInvalid);
  EXPECT_EQ(
      NcclCommunicator::Create({&device, &device}, {0, 0}).status().code(),
      kInvalid);
}

TEST(NcclCommunicatorTest, OneRankCollectives) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA GPU";
  RawCudaDevice device;
  std::unique_ptr<NcclCommunicator> comm =
      NcclCommunicator::Create({&device}, {0}).value();
  RawCudaStream stream(device);
  std::vector<Stream*> streams = {&stream};

  Context ctx;
  constexpr int64_t kCount = 1000003;
  Tensor* t = ctx.NewTensor(Type::kF32, {kCount}).value();
  std::unique_ptr<Buffer> buffer =
      device.buffer_type().Alloc(t->NumBytes()).value();
  t->buffer = buffer.get();
  t->data = buffer->base();
  std::vector<float> in(kCount);
  for (int64_t i = 0; i < kCount; ++i) in[i] = 0.25f * (i % 101) - 7.0f;
  ASSERT_TRUE(buffer->SetTensor(*t, in.data(), 0, t->NumBytes()).ok());

  // With one rank every collective leaves the tensor as it is.
  ASSERT_TRUE(comm->AllReduce(streams, {t}).ok());
  ASSERT_TRUE(comm->Broadcast(streams, 0, {t}).ok());
  ASSERT_TRUE(comm->AllGather(streams, {t}, {t}).ok());
  ASSERT_TRUE(comm->ReduceScatter(streams, {t}, {t}).ok());
  ASSERT_TRUE(stream.Synchronize().ok());
  EXPECT_TRUE(comm->CheckAsyncError().ok());
  std::vector<float> out(kCount);
  ASSERT_TRUE(buffer->GetTensor(*t, out.data(), 0, t->NumBytes()).ok());
  EXPECT_EQ(out, in);

  // Argument errors: an I32 reduction, a stream that is no CUDA stream's.
  Tensor ints = *t;
  ints.type = Type::kI32;
  EXPECT_EQ(comm->AllReduce(streams, {&ints}).code(), kInvalid);

  // A member that already failed fails the collective, naming it.
  stream.Fail(absl::DataLossError("earlier work failed"));
  const absl::Status status = comm->AllReduce(streams, {t});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("rank 0 (cuda0)"), std::string::npos)
      << status;
}

// A CUDA device's own streams are NativeCudaStreams: the collective runs in
// order with their work. The sum of one rank is its input; a tensor the
// stream scaled just before the all-reduce arrives scaled.
TEST(NcclCommunicatorTest, OneRankAllReduceOnACudaDeviceStream) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA GPU";
  std::vector<std::unique_ptr<CudaDevice>> devices =
      CreateCudaDevices().value();
  ASSERT_FALSE(devices.empty());
  CudaDevice& device = *devices[0];
  std::unique_ptr<NcclCommunicator> comm =
      NcclCommunicator::Create({&device}, {device.ordinal()}).value();
  std::unique_ptr<Stream> stream = device.CreateStream().value();
  ASSERT_NE(dynamic_cast<NativeCudaStream*>(stream.get()), nullptr);

  Context ctx;
  constexpr int64_t kCount = 1 << 20;
  Tensor* x = ctx.NewTensor(Type::kF32, {kCount}).value();
  Tensor* y = Scale(ctx, x, 3.0f).value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(y).ok());
  std::unique_ptr<Buffer> buffer =
      AllocTensors(device.buffer_type(), {x, y}).value();
  std::vector<float> in(kCount);
  for (int64_t i = 0; i < kCount; ++i) in[i] = 0.5f * (i % 37) - 4.0f;
  ASSERT_TRUE(stream->SetTensorAsync(*x, in.data(), 0, x->NumBytes()).ok());
  ASSERT_TRUE(stream->ComputeAsync(graph).ok());
  std::vector<Stream*> streams = {stream.get()};
  ASSERT_TRUE(comm->AllReduce(streams, {y}).ok());
  std::vector<float> out(kCount);
  ASSERT_TRUE(stream->GetTensorAsync(*y, out.data(), 0, y->NumBytes()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_TRUE(comm->CheckAsyncError().ok());
  for (int64_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(out[i], 3.0f * in[i]) << "at " << i;
  }
}

TEST(NcclCommunicatorTest, JoinRejectsBadArgumentsWithoutTouchingNccl) {
  RawCudaDevice device;
  const std::string id(128, 'x');
  const absl::Duration timeout = absl::Seconds(1);
  EXPECT_EQ(NcclCommunicator::Join(nullptr, 0, id, 1, 0, timeout)
                .status()
                .code(),
            kInvalid);
  EXPECT_EQ(NcclCommunicator::Join(&device, 0, "short", 1, 0, timeout)
                .status()
                .code(),
            kInvalid);
  EXPECT_EQ(NcclCommunicator::Join(&device, 0, id, 2, 2, timeout)
                .status()
                .code(),
            kInvalid);
  EXPECT_EQ(NcclCommunicator::Join(&device, 0, id, 0, 0, timeout)
                .status()
                .code(),
            kInvalid);
}

// A group of one rank made the way daemons make theirs: an id, then Join.
// Its blocks count the group's ranks; a group whose second rank never
// joins is given up after the timeout.
TEST(NcclCommunicatorTest, JoinedGroupOfOneRank) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA GPU";
  RawCudaDevice device;
  const std::string id = NcclCommunicator::NewGroupId().value();
  std::unique_ptr<NcclCommunicator> comm =
      NcclCommunicator::Join(&device, 0, id, 1, 0, absl::Seconds(30)).value();
  EXPECT_EQ(comm->ranks(), 1);
  EXPECT_EQ(comm->first_rank(), 0);
  RawCudaStream stream(device);
  std::vector<Stream*> streams = {&stream};

  Context ctx;
  Tensor* t = ctx.NewTensor(Type::kF16, {4097}).value();
  std::unique_ptr<Buffer> buffer =
      device.buffer_type().Alloc(t->NumBytes()).value();
  t->buffer = buffer.get();
  t->data = buffer->base();
  std::vector<uint16_t> in(4097);
  for (size_t i = 0; i < in.size(); ++i) in[i] = Fp32ToFp16(0.5f * (i % 9));
  ASSERT_TRUE(buffer->SetTensor(*t, in.data(), 0, t->NumBytes()).ok());
  ASSERT_TRUE(comm->AllReduce(streams, {t}).ok());
  ASSERT_TRUE(comm->Await(streams, absl::Seconds(30)).ok());
  ASSERT_TRUE(stream.Synchronize().ok());
  std::vector<uint16_t> out(in.size());
  ASSERT_TRUE(buffer->GetTensor(*t, out.data(), 0, t->NumBytes()).ok());
  EXPECT_EQ(out, in);

  const std::string lonely = NcclCommunicator::NewGroupId().value();
  const absl::Status status =
      NcclCommunicator::Join(&device, 0, lonely, 2, 0, absl::Seconds(2))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
}

}  // namespace
}  // namespace tessera
