// RemoteDevice and registered graphs against a real tesserad with two CPU
// devices: the op conformance suite on a remote device, and the scheduler's
// multi-device models computed through the daemon bitwise equal to local
// computation. And a tesserad serving --devices=all computing the
// transformer block on its GPU, where it has one.

#include "client/remote_device.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "backend/assembly/device_spec.h"
#include "client/client.h"
#include "client/remote_graph.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "sched/scheduler.h"
#include "sched/testing/models.h"
#include "tests/conformance/cases.h"
#include "tests/conformance/runner.h"
#include "tests/integration/daemon_process.h"

namespace tessera {
namespace {

using client::Client;
using client::RemoteDevice;
using client::RemoteGraph;
using client::TensorInput;
using client::TensorOutput;
using testing::Block;
using testing::BlockGraph;
using testing::BlockInputs;
using testing::ComputePipelined;
using testing::Mlp;
using testing::MlpGraph;
using testing::MlpInput;
using testing::Read;
using testing::Weights;
using testing::Write;

constexpr int kBatches = 8;

class RemoteDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = testing::DaemonProcess::Start({"--devices=cpu:2", "--threads=1"})
                  .value()
                  .release();
    client_ = Client::Connect(daemon_->address()).value().release();
    remote_ = new std::vector<std::unique_ptr<RemoteDevice>>(
        RemoteDevice::ListAll(*client_).value());
    local_ = new Registry;
    ASSERT_TRUE(AddDevices("cpu:3", 1, *local_).ok());
  }
  static void TearDownTestSuite() {
    delete remote_;
    delete client_;
    delete daemon_;
    delete local_;
  }

  static std::vector<Device*> Remote() {
    std::vector<Device*> out;
    for (auto& d : *remote_) out.push_back(d.get());
    return out;
  }

  // The MLP computed by a local scheduler on local CPU devices.
  static std::vector<std::vector<float>> LocalMlp(int n_batches) {
    Weights weights({local_->devices()[0], local_->devices()[1]});
    Mlp mlp = Mlp::Make(weights, 4).value();
    EXPECT_TRUE(weights.Upload().ok());
    auto stream0 = local_->devices()[0]->CreateStream().value();
    auto stream1 = local_->devices()[1]->CreateStream().value();
    Context ctx;
    Graph graph;
    auto [in, out] = MlpGraph(ctx, mlp, graph).value();
    auto sched =
        Scheduler::Create({stream0.get(), stream1.get()}, {}, {}).value();
    EXPECT_TRUE(sched->AllocGraph(graph).ok());
    std::vector<std::vector<float>> outs;
    for (int k = 0; k < n_batches; ++k) {
      EXPECT_TRUE(Write(*in, MlpInput(k).data()).ok());
      EXPECT_TRUE(sched->Compute(graph).ok());
      outs.push_back(Read(*out));
    }
    return outs;
  }

  static testing::DaemonProcess* daemon_;
  static Client* client_;
  static std::vector<std::unique_ptr<RemoteDevice>>* remote_;
  static Registry* local_;
};

testing::DaemonProcess* RemoteDeviceTest::daemon_ = nullptr;
Client* RemoteDeviceTest::client_ = nullptr;
std::vector<std::unique_ptr<RemoteDevice>>* RemoteDeviceTest::remote_ =
    nullptr;
Registry* RemoteDeviceTest::local_ = nullptr;

void ExpectBitwiseEqual(const std::vector<float>& a,
                        const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST_F(RemoteDeviceTest, DevicesAreTheDaemons) {
  ASSERT_EQ(remote_->size(), 2u);
  EXPECT_EQ((*remote_)[0]->name(), "remote:cpu0");
  const DeviceProps props = (*remote_)[1]->Props();
  EXPECT_EQ(props.type, DeviceType::kRemote);
  EXPECT_TRUE(props.caps.async);
  EXPECT_TRUE(props.caps.events);
  EXPECT_GT(props.memory_total, 0u);
}

TEST_F(RemoteDeviceTest, ConformanceSuitePasses) {
  int ran = 0;
  uint32_t seed = 1;
  for (const conformance::OpCase& op_case : conformance::AllCases()) {
    const absl::Status s = conformance::RunCase(op_case, *(*remote_)[0], seed++);
    if (absl::IsUnimplemented(s)) continue;
    EXPECT_TRUE(s.ok()) << op_case.name << ": " << s;
    ++ran;
  }
  EXPECT_GT(ran, 500);
}

// A local scheduler over the streams of both remote devices (and a local
// CPU as the fallback), pipelining micro-batches with n_copies = 2.
TEST_F(RemoteDeviceTest, LocalSchedulerOverRemoteDevicesEqualsLocal) {
  const auto want = LocalMlp(kBatches);
  Weights weights(Remote());
  Mlp mlp = Mlp::Make(weights, 4).value();
  ASSERT_TRUE(weights.Upload().ok());
  auto s0 = (*remote_)[0]->CreateStream().value();
  auto s1 = (*remote_)[1]->CreateStream().value();
  auto cpu = local_->devices()[2]->CreateStream().value();
  Context ctx;
  Graph graph;
  auto [in, out] = MlpGraph(ctx, mlp, graph).value();
  auto sched = Scheduler::Create({s0.get(), s1.get(), cpu.get()}, {},
                                 {.n_copies = 2})
                   .value();
  absl::Status s = sched->AllocGraph(graph);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_GE(sched->n_splits(), 2);
  absl::StatusOr<std::vector<std::vector<float>>> got =
      ComputePipelined(*sched, graph, *in, *out, kBatches);
  ASSERT_TRUE(got.ok()) << got.status();
  for (int k = 0; k < kBatches; ++k) {
    SCOPED_TRACE(k);
    ExpectBitwiseEqual((*got)[k], want[k]);
  }
}

// The MLP registered on the daemon over both devices, executed with many
// micro-batches in flight.
TEST_F(RemoteDeviceTest, RegisteredMlpPipelinesAndEqualsLocal) {
  const auto want = LocalMlp(kBatches);
  Weights weights(Remote());
  Mlp mlp = Mlp::Make(weights, 4).value();
  ASSERT_TRUE(weights.Upload().ok());
  Context ctx;
  Graph graph;
  auto [in, out] = MlpGraph(ctx, mlp, graph).value();
  for (int n_copies : {1, 4}) {
    SCOPED_TRACE(n_copies);
    auto remote =
        RemoteGraph::Register(*client_, graph, {.n_copies = n_copies});
    ASSERT_TRUE(remote.ok()) << remote.status();
    EXPECT_GE((*remote)->n_splits(), 2u);
    std::vector<std::vector<float>> inputs;
    for (int k = 0; k < kBatches; ++k) inputs.push_back(MlpInput(k));
    for (int k = 0; k < kBatches; ++k) {
      ASSERT_TRUE((*remote)
                      ->Submit({{in, inputs[k].data(), in->NumBytes()}}, {out})
                      .ok());
    }
    for (int k = 0; k < kBatches; ++k) {
      std::vector<float> got(out->NumElements());
      absl::Status s = (*remote)->Receive({{out, got.data(), out->NumBytes()}});
      ASSERT_TRUE(s.ok()) << s;
      ExpectBitwiseEqual(got, want[k]);
    }
  }
}

// The transformer block with its weights over `devices`: computed by a local
// scheduler over one stream per device when `client` is null (one output),
// else by the daemon `client` speaks to, one-shot Compute and registered
// Execute (two outputs).
std::vector<std::vector<float>> BlockOutputs(Client* client,
                                             std::vector<Device*> devices) {
  const BlockInputs data = BlockInputs::Make();
  Weights weights(devices);
  Block block = Block::Make(weights).value();
  EXPECT_TRUE(weights.Upload().ok());
  Context ctx;
  Graph graph;
  const BlockGraph g =
      BlockGraph::Make(ctx, block, /*flash=*/false, graph).value();
  Tensor* out = g.out;
  if (client == nullptr) {
    std::vector<std::unique_ptr<Stream>> streams;
    std::vector<Stream*> stream_ptrs;
    for (Device* device : devices) {
      streams.push_back(device->CreateStream().value());
      stream_ptrs.push_back(streams.back().get());
    }
    auto sched = Scheduler::Create(stream_ptrs, {}, {}).value();
    EXPECT_TRUE(sched->AllocGraph(graph).ok());
    EXPECT_TRUE(g.WriteInputs(data).ok());
    EXPECT_TRUE(sched->Compute(graph).ok());
    return {Read(*out)};
  }
  const std::vector<TensorInput> inputs = {
      {g.x, data.x.data(), g.x->NumBytes()},
      {g.pos, data.pos.data(), g.pos->NumBytes()},
      {g.mask, data.mask.data(), g.mask->NumBytes()}};
  std::vector<float> got(out->NumElements());
  std::vector<std::vector<float>> outs;
  absl::Status s =
      client->Compute(graph, inputs, {{out, got.data(), out->NumBytes()}});
  EXPECT_TRUE(s.ok()) << s;
  outs.push_back(got);
  auto registered = RemoteGraph::Register(*client, graph, {.n_copies = 2});
  EXPECT_TRUE(registered.ok()) << registered.status();
  if (!registered.ok()) return outs;
  s = (*registered)->Run(inputs, {{out, got.data(), out->NumBytes()}});
  EXPECT_TRUE(s.ok()) << s;
  outs.push_back(got);
  return outs;
}

// The transformer block through the daemon against the block computed
// locally over two devices.
TEST_F(RemoteDeviceTest, TransformerBlockThroughTheDaemonEqualsLocal) {
  const auto want =
      BlockOutputs(nullptr, {local_->devices()[0], local_->devices()[1]})
          .at(0);
  const auto got = BlockOutputs(client_, Remote());
  ASSERT_EQ(got.size(), 2u);
  ExpectBitwiseEqual(got[0], want);
  ExpectBitwiseEqual(got[1], want);
}

// The daemon serving --devices=all: the transformer block with its weights on
// its first GPU equals the block computed locally on the CPU, to the GPU's
// rounding (cuBLAS sums in another order). Skips where the daemon finds no
// GPU.
TEST(GpuDaemonTest, TransformerBlockOnCuda0EqualsLocal) {
  auto daemon = testing::DaemonProcess::Start({"--devices=all", "--threads=1"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto client = Client::Connect((*daemon)->address());
  ASSERT_TRUE(client.ok()) << client.status();
  auto remote = RemoteDevice::ListAll(**client);
  ASSERT_TRUE(remote.ok()) << remote.status();
  Device* cuda0 = nullptr;
  for (auto& device : *remote) {
    if (device->name() == "remote:cuda0") cuda0 = device.get();
  }
  if (cuda0 == nullptr) GTEST_SKIP() << "the daemon found no GPU";
  Registry local;
  ASSERT_TRUE(AddDevices("cpu", 1, local).ok());
  const auto want = BlockOutputs(nullptr, {local.devices()[0]}).at(0);
  const auto got = BlockOutputs(client->get(), {cuda0});
  ASSERT_EQ(got.size(), 2u);
  for (const std::vector<float>& g : got) {
    ASSERT_EQ(g.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(g[i], want[i], 1e-3f * (1.0f + std::fabs(want[i])))
          << "at " << i;
    }
  }
}

}  // namespace
}  // namespace tessera
