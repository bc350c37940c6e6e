// Tensor parallelism across daemons: a client's MetaDevice over one CPU
// device of each of two tesserad processes, whose collectives a
// HostCommunicator runs by staging the members' tensors through the client.
// Every collective equals its definition, for each reduced type and odd
// sizes; the LLaMA-shaped layer stack split over the two daemons equals one
// local device; a daemon that dies fails the collective with a status
// naming its rank, and the client goes on.

#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/alloc/tensor_allocator.h"
#include "backend/comm/host_communicator.h"
#include "backend/meta/llama_policy.h"
#include "backend/meta/meta_device.h"
#include "client/client.h"
#include "client/remote_device.h"
#include "client/spanning_communicator.h"
#include "gmock/gmock.h"
#include "graph/context.h"
#include "graph/type.h"
#include "gtest/gtest.h"
#include "proto/tessera.pb.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/llama_stack.h"

namespace tessera {
namespace {

using client::Client;
using client::RemoteDevice;
using ::testing::HasSubstr;
using testing::LlamaStack;
using testing::Local;
using testing::Nmse;

// One daemon with one CPU device, and this client's session on it.
struct Member {
  std::unique_ptr<testing::DaemonProcess> daemon;
  std::unique_ptr<Client> client;
  std::unique_ptr<RemoteDevice> device;
};

Member StartMember() {
  Member m;
  m.daemon =
      testing::DaemonProcess::Start({"--devices=cpu", "--threads=1"}).value();
  m.client = Client::Connect(m.daemon->address()).value();
  m.device = std::move(RemoteDevice::ListAll(*m.client).value().front());
  return m;
}

class SpanningTpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) members_.push_back(StartMember());
    for (Member& m : members_) {
      devices_.push_back(m.device.get());
      streams_.push_back(m.device->CreateStream().value());
    }
    comm_ = HostCommunicator::Create(devices_).value();
  }
  // The communicator must outlive the streams' runs of its collectives
  // (backend/comm/communicator.h), also when a test stops early or leaves
  // a failed stream: every stream is synchronized before it goes.
  void TearDown() override { SyncAll().IgnoreError(); }

  // A tensor of `type` and `n` elements on each member.
  std::vector<Tensor*> OnEach(Type type, int64_t n) {
    std::vector<Tensor*> tensors;
    for (Device* d : devices_) {
      Tensor* t = ctx_.NewTensor(type, {n}).value();
      buffers_.push_back(AllocTensors(d->buffer_type(), {t}).value());
      tensors.push_back(t);
    }
    return tensors;
  }
  std::vector<Stream*> Streams() {
    return {streams_[0].get(), streams_[1].get()};
  }
  absl::Status SyncAll() {
    absl::Status status;
    for (auto& s : streams_) status.Update(s->Synchronize());
    return status;
  }

  std::vector<Member> members_;
  std::vector<Device*> devices_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::unique_ptr<HostCommunicator> comm_;
  Context ctx_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

// Small integers, exact in F32, F16 and BF16, so that sums are exact too.
float Small(int64_t i, int rank) {
  return static_cast<float>(i % 7 + 3 * rank);
}

void WriteFloats(Tensor& t, const std::vector<float>& v) {
  std::vector<char> raw(t.NumBytes());
  RowFromFloat(t.type, v.data(), raw.data(), static_cast<int64_t>(v.size()));
  ASSERT_TRUE(t.buffer->SetTensor(t, raw.data(), 0, raw.size()).ok());
}

std::vector<float> ReadFloats(const Tensor& t) {
  std::vector<char> raw(t.NumBytes());
  EXPECT_TRUE(t.buffer->GetTensor(t, raw.data(), 0, raw.size()).ok());
  std::vector<float> v(t.NumElements());
  RowToFloat(t.type, raw.data(), v.data(), static_cast<int64_t>(v.size()));
  return v;
}

TEST_F(SpanningTpTest, AllReduceSumsEveryReducedType) {
  for (Type type : {Type::kF32, Type::kF16, Type::kBF16}) {
    SCOPED_TRACE(TypeName(type));
    const int64_t n = 1001;
    std::vector<Tensor*> t = OnEach(type, n);
    for (int r = 0; r < 2; ++r) {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = Small(i, r);
      WriteFloats(*t[r], v);
    }
    ASSERT_TRUE(comm_->AllReduce(Streams(), t).ok());
    ASSERT_TRUE(SyncAll().ok());
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> got = ReadFloats(*t[r]);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], Small(i, 0) + Small(i, 1))
            << "rank " << r << " " << i;
      }
    }
  }
}

TEST_F(SpanningTpTest, AllGatherReduceScatterAndBroadcast) {
  const int64_t n = 333;
  std::vector<Tensor*> send = OnEach(Type::kF32, n);
  std::vector<Tensor*> recv = OnEach(Type::kF32, 2 * n);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = Small(i, r);
    WriteFloats(*send[r], v);
  }
  ASSERT_TRUE(comm_->AllGather(Streams(), send, recv).ok());
  ASSERT_TRUE(SyncAll().ok());
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> got = ReadFloats(*recv[r]);
    for (int64_t i = 0; i < 2 * n; ++i) {
      ASSERT_EQ(got[i], Small(i % n, static_cast<int>(i / n))) << r << " " << i;
    }
  }

  // recv (2n values per rank) reduced and scattered into send (n per rank).
  ASSERT_TRUE(comm_->ReduceScatter(Streams(), recv, send).ok());
  ASSERT_TRUE(SyncAll().ok());
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> got = ReadFloats(*send[r]);
    for (int64_t i = 0; i < n; ++i) {
      // Both ranks hold the gathered values: block r of each, twice.
      ASSERT_EQ(got[i], 2 * Small(i, r)) << r << " " << i;
    }
  }

  std::vector<float> root(n);
  for (int64_t i = 0; i < n; ++i) root[i] = -Small(i, 5);
  WriteFloats(*send[1], root);
  ASSERT_TRUE(comm_->Broadcast(Streams(), 1, send).ok());
  ASSERT_TRUE(SyncAll().ok());
  EXPECT_EQ(ReadFloats(*send[0]), root);
  EXPECT_EQ(ReadFloats(*send[1]), root);
}

// Device memory in use on the daemon of `client`, as it reports it.
uint64_t Used(Client& client) {
  const v1::DeviceInfo d = client.ListDevices().value().front();
  return d.memory_total() - d.memory_free();
}

TEST_F(SpanningTpTest, LayerStackOverTwoDaemonsEqualsOneDevice) {
  auto meta =
      MetaDevice::Create("tp", devices_, *comm_,
                         LlamaSplitPolicy(2, LlamaStack::SplitOptions()))
          .value();
  std::vector<uint64_t> before;
  for (Member& m : members_) before.push_back(Used(*m.client));
  LlamaStack stack(*meta);
  // Each daemon holds its half of the split weights, not the whole.
  size_t total = 0;
  for (const Tensor* w : stack.weights) total += w->NumBytes();
  for (int r = 0; r < 2; ++r) {
    const uint64_t used = Used(*members_[r].client) - before[r];
    EXPECT_GE(used, total * 4 / 10) << r;
    EXPECT_LE(used, total * 6 / 10) << r;
  }
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(k);
    EXPECT_LT(Nmse(stack.RunOn(*meta, k), Local(k)), 1e-10);
  }
}

TEST_F(SpanningTpTest, ADeadDaemonFailsTheCollectiveNamingItsRank) {
  std::vector<Tensor*> t = OnEach(Type::kF32, 64);
  ASSERT_TRUE(members_[1].daemon->Kill(SIGKILL).ok());
  ASSERT_TRUE(members_[1].daemon->Wait(absl::Seconds(30)).ok());
  ASSERT_TRUE(comm_->AllReduce(Streams(), t).ok());
  const absl::Status s0 = streams_[0]->Synchronize();
  EXPECT_FALSE(s0.ok());
  EXPECT_THAT(s0.message(), HasSubstr("rank 1"));
  EXPECT_FALSE(streams_[1]->Synchronize().ok());
  // The other member still serves.
  std::vector<float> v(64, 1.0f);
  WriteFloats(*t[0], v);
  EXPECT_EQ(ReadFloats(*t[0]), v);
}

// Groups whose daemons run the collectives themselves (NCCL) need CUDA
// devices: over CPU devices they are refused with a clear error, and the
// calls behind them validate what they get; the daemons go on serving.
TEST_F(SpanningTpTest, NcclGroupsAreRefusedOnCpuDevices) {
  std::vector<RemoteDevice*> remote = {members_[0].device.get(),
                                       members_[1].device.get()};
  auto comm = client::SpanningCommunicator::Create(remote, absl::Seconds(5));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(comm.status().message(), HasSubstr("rank 0"));
  EXPECT_THAT(comm.status().message(), HasSubstr("CUDA"));

  // Two ranks in one session would wait for each other: refused, as is a
  // timeout out of range, before any daemon is asked.
  auto again = RemoteDevice::ListAll(*members_[0].client).value();
  std::vector<RemoteDevice*> one_session = {members_[0].device.get(),
                                            again.front().get()};
  EXPECT_EQ(client::SpanningCommunicator::Create(one_session).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client::SpanningCommunicator::Create(remote, absl::Hours(1))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  Client& c = *members_[0].client;
  const std::string id(128, 'x');
  auto joined = c.JoinCommGroup("cpu0", id, 2, 0, absl::Seconds(1));
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(joined.status().message(), HasSubstr("cpu0"));
  EXPECT_EQ(c.JoinCommGroup("gpu7", id, 2, 0, absl::Seconds(1)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(
      c.JoinCommGroup("cpu0", id, 2, 0, absl::Seconds(601)).status().code(),
      absl::StatusCode::kInvalidArgument);
  v1::RunCollectiveRequest run;
  run.set_group(987654321);
  run.set_kind(v1::RunCollectiveRequest::ALL_REDUCE);
  run.set_type(static_cast<int32_t>(Type::kF32));
  run.set_elements(4);
  const absl::Status s = c.RunCollective(run);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(c.LeaveCommGroup(987654321).code(), absl::StatusCode::kNotFound);

  // Still serving: the host communicator's all-reduce works.
  std::vector<Tensor*> t = OnEach(Type::kF32, 8);
  WriteFloats(*t[0], std::vector<float>(8, 1.0f));
  WriteFloats(*t[1], std::vector<float>(8, 2.0f));
  ASSERT_TRUE(comm_->AllReduce(Streams(), t).ok());
  ASSERT_TRUE(SyncAll().ok());
  EXPECT_EQ(ReadFloats(*t[1]), std::vector<float>(8, 3.0f));
}

// With a GPU: a group of one rank on the daemon's cuda0, made and run the
// way groups spanning daemons are (more ranks need more GPUs).
TEST(SpanningNcclTest, OneRankGroupOnADaemonsGpu) {
  auto daemon =
      testing::DaemonProcess::Start({"--devices=all", "--threads=1"}).value();
  auto client = Client::Connect(daemon->address()).value();
  std::vector<std::unique_ptr<RemoteDevice>> devices =
      RemoteDevice::ListAll(*client).value();
  RemoteDevice* cuda0 = nullptr;
  for (auto& d : devices) {
    if (d->remote_name() == "cuda0") cuda0 = d.get();
  }
  if (cuda0 == nullptr) GTEST_SKIP() << "the daemon found no GPU";
  auto comm = client::SpanningCommunicator::Create({cuda0}).value();
  Context ctx;
  Tensor* t = ctx.NewTensor(Type::kF32, {1001}).value();
  auto buffer = AllocTensors(cuda0->buffer_type(), {t}).value();
  std::vector<float> v(1001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = Small(i, 1);
  WriteFloats(*t, v);
  auto stream = cuda0->CreateStream().value();
  Stream* streams[] = {stream.get()};
  ASSERT_TRUE(comm->AllReduce(streams, {t}).ok());
  ASSERT_TRUE(comm->Broadcast(streams, 0, {t}).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(ReadFloats(*t), v);
}

}  // namespace
}  // namespace tessera
