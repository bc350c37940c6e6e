// Out of memory on the CUDA device: every way of running out is
// RESOURCE_EXHAUSTED naming the device, never an abort, and the device keeps
// computing and allocating afterwards. Skips (with a message) without a GPU.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/cuda/cuda_device.h"
#include "backend/device.h"
#include "backend/stream.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/tensor.h"
#include "backend/alloc/tensor_allocator.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

bool Mentions(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != absl::string_view::npos;
}

class CudaOomTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<std::unique_ptr<CudaDevice>>> devices =
        CreateCudaDevices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    if (devices->empty()) {
      GTEST_SKIP() << "no CUDA device on this machine (no GPU or no driver): "
                      "the out-of-memory tests need one";
    }
    devices_ = std::move(*devices);
    device_ = devices_[0].get();
  }

  // y = 2x + 1 over kN values, with its memory and stream made before memory
  // runs out.
  struct Scaler {
    static constexpr int64_t kN = 4096;
    Context ctx;
    Tensor* x = nullptr;
    Tensor* y = nullptr;
    std::unique_ptr<Buffer> buffer;
    std::unique_ptr<Stream> stream;
    Graph graph;
  };

  absl::Status MakeScaler(Scaler& s) {
    absl::StatusOr<Tensor*> x = s.ctx.NewTensor(Type::kF32, {Scaler::kN});
    if (!x.ok()) return x.status();
    absl::StatusOr<Tensor*> y = Scale(s.ctx, *x, 2.0f, 1.0f);
    if (!y.ok()) return y.status();
    s.x = *x;
    s.y = *y;
    absl::StatusOr<std::unique_ptr<Buffer>> buffer =
        AllocTensors(device_->buffer_type(), {s.x, s.y});
    if (!buffer.ok()) return buffer.status();
    s.buffer = std::move(*buffer);
    absl::StatusOr<std::unique_ptr<Stream>> stream = device_->CreateStream();
    if (!stream.ok()) return stream.status();
    s.stream = std::move(*stream);
    return s.graph.Expand(s.y);
  }

  static void ExpectScales(Scaler& s) {
    std::vector<float> in(Scaler::kN);
    for (int64_t i = 0; i < Scaler::kN; ++i) in[i] = 0.25f * (i % 17);
    std::vector<float> out(Scaler::kN);
    ASSERT_TRUE(s.stream->SetTensorAsync(*s.x, in.data(), 0, in.size() * 4)
                    .ok());
    ASSERT_TRUE(s.stream->ComputeAsync(s.graph).ok());
    ASSERT_TRUE(
        s.stream->GetTensorAsync(*s.y, out.data(), 0, out.size() * 4).ok());
    const absl::Status status = s.stream->Synchronize();
    ASSERT_TRUE(status.ok()) << status;
    for (int64_t i = 0; i < Scaler::kN; ++i) {
      ASSERT_EQ(out[i], 2.0f * in[i] + 1.0f) << i;
    }
  }

  std::vector<std::unique_ptr<CudaDevice>> devices_;
  CudaDevice* device_ = nullptr;
};

TEST_F(CudaOomTest, MoreThanTheDeviceHasIsResourceExhaustedAtOnce) {
  const size_t total = device_->Props().memory_total;
  absl::StatusOr<std::unique_ptr<Buffer>> too_big =
      device_->buffer_type().Alloc(total + 1);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted)
      << too_big.status();
  EXPECT_TRUE(Mentions(too_big.status(), device_->name())) << too_big.status();
  // Below the total but above what is free: cudaMalloc itself refuses.
  absl::StatusOr<std::unique_ptr<Buffer>> almost =
      device_->buffer_type().Alloc(total - kMiB);
  EXPECT_EQ(almost.status().code(), absl::StatusCode::kResourceExhausted)
      << almost.status();
  EXPECT_TRUE(device_->health().ok()) << device_->health();

  Scaler scaler;
  ASSERT_TRUE(MakeScaler(scaler).ok());
  ExpectScales(scaler);
}

// Fills the device with 1 GiB buffers, then smaller ones, until allocation
// fails; the failure is RESOURCE_EXHAUSTED, work queued on an existing
// stream still runs while memory is full, and freeing makes room again.
TEST_F(CudaOomTest, FillingTheDeviceIsResourceExhaustedAndItKeepsWorking) {
  Scaler scaler;
  ASSERT_TRUE(MakeScaler(scaler).ok());
  ExpectScales(scaler);

  std::vector<std::unique_ptr<Buffer>> hoard;
  absl::Status failure;
  for (size_t size : {kGiB, 64 * kMiB}) {
    while (true) {
      absl::StatusOr<std::unique_ptr<Buffer>> buffer =
          device_->buffer_type().Alloc(size);
      if (!buffer.ok()) {
        failure = buffer.status();
        break;
      }
      hoard.push_back(std::move(*buffer));
    }
    ASSERT_EQ(failure.code(), absl::StatusCode::kResourceExhausted) << failure;
  }
  EXPECT_TRUE(Mentions(failure, device_->name())) << failure;
  EXPECT_FALSE(hoard.empty());
  EXPECT_TRUE(device_->health().ok()) << device_->health();
  EXPECT_LT(device_->Props().memory_free,
            64 * kMiB + CudaPool::kDefaultChunkSize);

  // Full, yet work on memory allocated before still runs.
  ExpectScales(scaler);

  hoard.clear();
  absl::StatusOr<std::unique_ptr<Buffer>> again =
      device_->buffer_type().Alloc(kGiB);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectScales(scaler);
  EXPECT_TRUE(device_->health().ok()) << device_->health();
}

TEST_F(CudaOomTest, MorePinnedMemoryThanTheMachineHasIsResourceExhausted) {
  BufferType* host = device_->host_buffer_type();
  ASSERT_NE(host, nullptr);
  absl::StatusOr<std::unique_ptr<Buffer>> too_big =
      host->Alloc(host->max_size() + 1);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted)
      << too_big.status();
  absl::StatusOr<std::unique_ptr<Buffer>> small = host->Alloc(kMiB);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_TRUE(device_->health().ok()) << device_->health();
}

}  // namespace
}  // namespace tessera
