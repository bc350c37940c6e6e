// Memory bounds of a real tesserad: CPU devices share what the process may
// use, a session's quota counts every byte it causes (a freed buffer that a
// registered graph still uses, a one-shot Compute's intermediates), and
// going over is RESOURCE_EXHAUSTED while the daemon keeps serving.

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "base/sanitizers.h"
#include "proto/tessera.grpc.pb.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_graph.h"


namespace tessera {
namespace {

namespace v1 = ::tessera::v1;


std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ctx;
}

class MemoryBoundsTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags) {
    daemon_ = testing::DaemonProcess::Start(std::move(flags)).value();
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    stub_ = v1::Tessera::NewStub(grpc::CreateCustomChannel(
        daemon_->address(), grpc::InsecureChannelCredentials(), args));
    v1::HelloRequest hello;
    hello.set_min_version(1);
    hello.set_max_version(1);
    v1::HelloResponse response;
    ASSERT_TRUE(stub_->Hello(Ctx().get(), hello, &response).ok());
    session_ = response.session();
  }

  grpc::Status Alloc(const std::string& device, uint64_t size,
                     uint64_t* handle = nullptr) {
    v1::AllocBufferRequest request;
    request.set_session(session_);
    request.set_device(device);
    request.set_size(size);
    v1::AllocBufferResponse response;
    grpc::Status s = stub_->AllocBuffer(Ctx().get(), request, &response);
    if (handle != nullptr) *handle = response.buffer();
    return s;
  }

  std::vector<v1::DeviceInfo> Devices() {
    v1::ListDevicesRequest request;
    request.set_session(session_);
    v1::ListDevicesResponse response;
    EXPECT_TRUE(stub_->ListDevices(Ctx().get(), request, &response).ok());
    return {response.devices().begin(), response.devices().end()};
  }

  std::unique_ptr<testing::DaemonProcess> daemon_;
  std::unique_ptr<v1::Tessera::Stub> stub_;
  std::string session_;
};


// Under a data-segment limit (inherited by the daemon), cpu:2 devices
// split what the process may use: together they promise no more than the
// limit, and asking for more than a device's share, or than the host can
// back, is RESOURCE_EXHAUSTED rather than the kernel's OOM killer.
TEST_F(MemoryBoundsTest, CpuDevicesShareWhatTheProcessMayUse) {
#ifdef TESSERA_SANITIZED
  GTEST_SKIP() << "runs under a memory limit that sanitizers cannot meet";
#endif
  constexpr uint64_t kLimit = uint64_t{3} << 30;
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_DATA, &saved), 0);
  rlimit lowered = saved;
  if (saved.rlim_cur == RLIM_INFINITY || saved.rlim_cur > kLimit) {
    lowered.rlim_cur = kLimit;
  }
  ASSERT_EQ(setrlimit(RLIMIT_DATA, &lowered), 0);
  Start({"--devices=cpu:2", "--threads=1"});
  ASSERT_EQ(setrlimit(RLIMIT_DATA, &saved), 0);

  const std::vector<v1::DeviceInfo> devices = Devices();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_LE(devices[0].memory_total() + devices[1].memory_total(),
            lowered.rlim_cur);
  for (const v1::DeviceInfo& d : devices) {
    grpc::Status s = Alloc(d.name(), d.memory_total() + 1);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << s.error_message();
  }
  // Each device's share is real: a buffer of most of it can be had.
  uint64_t handle = 0;
  grpc::Status s = Alloc("cpu1", devices[1].memory_total() / 4, &handle);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(daemon_->IsRunning());
}

// A buffer freed by the client but used by a registered graph stays
// charged until the graph is released.
TEST_F(MemoryBoundsTest, AFreedBufferAGraphUsesStaysCharged) {
  constexpr uint64_t kBytes = 12 << 20;
  Start({"--devices=cpu:1", "--threads=1", "--session_memory_quota=16M"});
  uint64_t buffer = 0;
  ASSERT_TRUE(Alloc("cpu0", kBytes, &buffer).ok());

  v1::RegisterGraphRequest reg;
  reg.set_session(session_);
  v1::GraphDef& g = *reg.mutable_graph();
  testing::AddF32Tensor(g, 0, testing::kRawOpNone, {}, {64})->mutable_data()->set_buffer(buffer);
  testing::AddF32Tensor(g, 1, testing::kRawOpNone, {}, {64});
  testing::AddF32Tensor(g, 2, testing::kRawOpAdd, {0, 1}, {64});
  v1::RegisterGraphResponse registered;
  grpc::Status s = stub_->RegisterGraph(Ctx().get(), reg, &registered);
  ASSERT_TRUE(s.ok()) << s.error_message();

  v1::FreeBufferRequest free;
  free.set_session(session_);
  free.set_buffer(buffer);
  v1::FreeBufferResponse freed;
  ASSERT_TRUE(stub_->FreeBuffer(Ctx().get(), free, &freed).ok());
  s = Alloc("cpu0", kBytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_NE(s.error_message().find("--session_memory_quota"),
            std::string::npos);

  v1::ReleaseGraphRequest release;
  release.set_session(session_);
  release.set_graph(registered.graph());
  v1::ReleaseGraphResponse released;
  ASSERT_TRUE(stub_->ReleaseGraph(Ctx().get(), release, &released).ok());
  s = Alloc("cpu0", kBytes);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// y = x + x, z = y + y over 4 MiB: the intermediates of a one-shot Compute
// count against the quota.
TEST_F(MemoryBoundsTest, ComputeMemoryCountsAgainstTheQuota) {
  constexpr int64_t kFloats = (4 << 20) / 4;
  Start({"--devices=cpu:1", "--threads=1", "--session_memory_quota=6M"});
  v1::ComputeRequest request;
  request.set_session(session_);
  v1::GraphDef& g = *request.mutable_graph();
  testing::AddF32Tensor(g, 0, testing::kRawOpNone, {}, {kFloats});
  testing::AddF32Tensor(g, 1, testing::kRawOpAdd, {0, 0}, {kFloats});
  testing::AddF32Tensor(g, 2, testing::kRawOpAdd, {1, 1}, {kFloats});
  v1::TensorData* in = request.add_inputs();
  in->set_id(0);
  in->set_data(std::string(4 * kFloats, '\0'));
  request.add_outputs(2);
  v1::ComputeResponse response;
  grpc::Status s = stub_->Compute(Ctx().get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_NE(s.error_message().find("compute memory"), std::string::npos)
      << s.error_message();
  // Nothing stays charged: a buffer of most of the quota can be had.
  EXPECT_TRUE(Alloc("cpu0", 5 << 20).ok());
  EXPECT_TRUE(daemon_->IsRunning());
}

}  // namespace
}  // namespace tessera
