// Sessions against a real tesserad: two clients cannot see or touch each
// other's handles and stay correct under concurrent load; a client killed
// mid-upload or mid-compute has its memory freed while the daemon keeps
// serving.
//
// The killed clients are this binary run again as
// `sessions_test --doomed-client=upload|compute ADDRESS`: it takes memory,
// prints "ready", and keeps working until it is killed.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"
#include "client/remote_device.h"
#include "client/remote_graph.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera.grpc.pb.h"
#include "sched/testing/models.h"
#include "tests/integration/daemon_process.h"

extern char** environ;

namespace tessera {
namespace {

using client::Client;
using client::RemoteDevice;
using client::RemoteGraph;
using testing::Mlp;
using testing::MlpInput;
using testing::NaiveMlp;
using testing::NewInput;
using testing::Weights;

constexpr uint64_t kDoomedBytes = 64 << 20;

// Free memory of the daemon's cpu0 as a new client sees it.
uint64_t MemoryFree(const std::string& address) {
  auto client = Client::Connect(address).value();
  return client->ListDevices().value().at(0).memory_free();
}

// A registered MLP of one client, with its weights on the daemon.
struct RemoteMlp {
  std::unique_ptr<Client> client;
  std::vector<std::unique_ptr<RemoteDevice>> devices;
  std::unique_ptr<Weights> weights;
  Mlp mlp;
  Context ctx;
  Tensor* in = nullptr;
  Tensor* out = nullptr;
  Graph graph;
  std::unique_ptr<RemoteGraph> remote;

  static std::unique_ptr<RemoteMlp> Make(const std::string& address,
                                         int layers) {
    auto m = std::make_unique<RemoteMlp>();
    m->client = Client::Connect(address).value();
    m->devices = RemoteDevice::ListAll(*m->client).value();
    m->weights = std::make_unique<Weights>(
        std::vector<Device*>{m->devices[0].get()});
    m->mlp = Mlp::Make(*m->weights, layers).value();
    EXPECT_TRUE(m->weights->Upload().ok());
    m->in = NewInput(m->ctx, Type::kF32, {Mlp::kDim, Mlp::kBatch}, "x").value();
    m->out = m->mlp.Forward(m->ctx, m->in).value();
    m->out->flags |= kFlagOutput;
    EXPECT_TRUE(m->graph.Expand(m->out).ok());
    auto remote = RemoteGraph::Register(*m->client, m->graph, {.n_copies = 2});
    EXPECT_TRUE(remote.ok()) << remote.status();
    m->remote = std::move(remote).value();
    return m;
  }

  absl::Status Run(const std::vector<float>& x, std::vector<float>& y) {
    y.resize(out->NumElements());
    return remote->Run({{in, x.data(), in->NumBytes()}},
                       {{out, y.data(), out->NumBytes()}});
  }
};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::abs(want[i])))
        << "at " << i;
  }
}

class SessionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = testing::DaemonProcess::Start({"--devices=cpu:2"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(daemon).value();
  }

  // Runs this binary as a doomed client in `mode`; returns its pid once it
  // printed "ready".
  pid_t StartDoomed(const std::string& mode) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    const std::string self = "/proc/self/exe";
    const std::string flag = "--doomed-client=" + mode;
    std::vector<char*> argv = {const_cast<char*>(self.c_str()),
                               const_cast<char*>(flag.c_str()),
                               const_cast<char*>(daemon_->address().c_str()),
                               nullptr};
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(),
                          environ),
              0);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    std::string line;
    char c;
    while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
    close(fds[0]);
    EXPECT_EQ(line, "ready");
    return pid;
  }

  // Kills `pid` and waits until the daemon's free memory is back to
  // `before` (or 60 s pass: a graph already computing runs to its end).
  void KillAndExpectMemoryBack(pid_t pid, uint64_t before) {
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    uint64_t now = 0;
    for (int i = 0; i < 600; ++i) {
      now = MemoryFree(daemon_->address());
      if (now == before) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(now, before);
    EXPECT_TRUE(daemon_->IsRunning());
  }

  std::unique_ptr<testing::DaemonProcess> daemon_;
};

TEST_F(SessionsTest, HandlesOfAnotherSessionAreNotFound) {
  auto a = Client::Connect(daemon_->address()).value();
  auto b = Client::Connect(daemon_->address()).value();
  auto buf = a->AllocBuffer("cpu0", 256, BufferUsage::kAny).value();
  std::vector<uint8_t> secret(256, 0x5a);
  v1::TensorRef ref;
  ref.set_buffer(buf.handle);
  ASSERT_TRUE(a->WriteTensor(ref, secret.data(), secret.size()).ok());

  std::vector<uint8_t> got(256);
  EXPECT_TRUE(absl::IsNotFound(b->ReadTensor(ref, got.data(), got.size())));
  EXPECT_TRUE(absl::IsNotFound(b->WriteTensor(ref, got.data(), got.size())));
  EXPECT_TRUE(absl::IsNotFound(b->MemsetTensor(ref, 0, 256)));
  EXPECT_TRUE(absl::IsNotFound(b->ClearBuffer(buf.handle, 0)));
  EXPECT_TRUE(absl::IsNotFound(b->FreeBuffer(buf.handle)));
  auto own = b->AllocBuffer("cpu0", 256, BufferUsage::kAny).value();
  v1::TensorRef dst;
  dst.set_buffer(own.handle);
  EXPECT_TRUE(absl::IsNotFound(b->CopyTensor(ref, dst, 256)));
  EXPECT_TRUE(absl::IsNotFound(b->ReleaseGraph(1)));

  // a's data is untouched.
  ASSERT_TRUE(a->ReadTensor(ref, got.data(), got.size()).ok());
  EXPECT_EQ(got, secret);
}

TEST_F(SessionsTest, ConcurrentClientsStayCorrect) {
  constexpr int kClients = 3;
  constexpr int kRuns = 15;
  std::vector<std::unique_ptr<RemoteMlp>> mlps;
  for (int c = 0; c < kClients; ++c) {
    mlps.push_back(RemoteMlp::Make(daemon_->address(), 2 + c));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      RemoteMlp& m = *mlps[c];
      for (int k = 0; k < kRuns; ++k) {
        const std::vector<float> x = MlpInput(c * 100 + k);
        std::vector<float> y;
        absl::Status s = m.Run(x, y);
        if (!s.ok()) {
          ADD_FAILURE() << "client " << c << ": " << s;
          ++failures;
          return;
        }
        ExpectNear(y, NaiveMlp(m.mlp, x));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(SessionsTest, ClientKilledMidUploadIsFreed) {
  const uint64_t before = MemoryFree(daemon_->address());
  const pid_t pid = StartDoomed("upload");
  EXPECT_LE(MemoryFree(daemon_->address()), before - kDoomedBytes);
  KillAndExpectMemoryBack(pid, before);
  // The daemon still serves new sessions correctly.
  auto m = RemoteMlp::Make(daemon_->address(), 2);
  std::vector<float> y;
  ASSERT_TRUE(m->Run(MlpInput(1), y).ok());
  ExpectNear(y, NaiveMlp(m->mlp, MlpInput(1)));
}

TEST_F(SessionsTest, ClientKilledMidComputeIsFreed) {
  const uint64_t before = MemoryFree(daemon_->address());
  const pid_t pid = StartDoomed("compute");
  EXPECT_LT(MemoryFree(daemon_->address()), before);
  KillAndExpectMemoryBack(pid, before);
  auto m = RemoteMlp::Make(daemon_->address(), 3);
  std::vector<float> y;
  ASSERT_TRUE(m->Run(MlpInput(2), y).ok());
  ExpectNear(y, NaiveMlp(m->mlp, MlpInput(2)));
}

// The doomed client: "upload" holds a kDoomedBytes buffer and streams
// chunks into it without end; "compute" keeps executions of a large
// matrix product in flight.
int DoomedClient(const std::string& mode, const std::string& address) {
  auto client = Client::Connect(address).value();
  if (mode == "upload") {
    auto buf =
        client->AllocBuffer("cpu0", kDoomedBytes, BufferUsage::kAny).value();
    // A stream the client library would never leave open: raw stubs.
    auto stub = v1::Tessera::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::WriteTensorResponse response;
    auto writer = stub->WriteTensor(&context, &response);
    v1::WriteTensorRequest request;
    request.mutable_header()->set_session(client->session());
    request.mutable_header()->mutable_dst()->set_buffer(buf.handle);
    request.mutable_header()->set_size(kDoomedBytes);
    writer->Write(request);
    request.set_chunk(std::string(1 << 16, 'x'));
    writer->Write(request);
    std::printf("ready\n");
    std::fflush(stdout);
    while (true) {
      writer->Write(request);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  auto devices = RemoteDevice::ListAll(*client).value();
  Weights weights({devices[0].get()});
  Context ctx;
  Tensor* w = weights.Add({512, 512}, "w").value();
  if (!weights.Upload().ok()) return 1;
  Tensor* x = NewInput(ctx, Type::kF32, {512, 64}, "x").value();
  Tensor* y = x;
  for (int i = 0; i < 4; ++i) y = MulMat(ctx, w, y).value();
  y->flags |= kFlagOutput;
  Graph graph;
  if (!graph.Expand(y).ok()) return 1;
  auto remote = RemoteGraph::Register(*client, graph, {.n_copies = 2}).value();
  std::vector<float> input(x->NumElements(), 0.5f);
  for (int k = 0; k < 8; ++k) {
    if (!remote->Submit({{x, input.data(), x->NumBytes()}}, {y}).ok()) return 1;
  }
  if (!remote->Flush().ok()) return 1;
  std::printf("ready\n");
  std::fflush(stdout);
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  const std::string flag = "--doomed-client=";
  if (argc == 3 && std::strncmp(argv[1], flag.c_str(), flag.size()) == 0) {
    return tessera::DoomedClient(argv[1] + flag.size(), argv[2]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
