// Idle graphs cost a real tesserad no threads: a session registers 100
// graphs on a CPU device of 2 threads per stream and executes each once,
// then, once its streams have idled past their linger, the daemon has
// about the threads it had before the first registration (at most kSlack
// more: gRPC's own threads may grow with the load).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "backend/testing/thread_count.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera.grpc.pb.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_graph.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

// out = a^T b (ggml's MUL_MAT): 37 x 29 outputs of 64 products, enough to
// be split over a stream's 2 threads.
constexpr int64_t kK = 64, kM = 37, kN = 29;
constexpr int kGraphs = 100;
constexpr int kSlack = 8;

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(60));
  return ctx;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

TEST(IdleThreadsTest, RegisteredGraphsCostNoThreadsWhenIdle) {
  auto daemon =
      testing::DaemonProcess::Start({"--devices=cpu:1", "--threads=2"}).value();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto stub = v1::Tessera::NewStub(grpc::CreateCustomChannel(
      daemon->address(), grpc::InsecureChannelCredentials(), args));
  v1::HelloRequest hello;
  hello.set_min_version(1);
  hello.set_max_version(1);
  v1::HelloResponse session;
  ASSERT_TRUE(stub->Hello(Ctx().get(), hello, &session).ok());
  const int before = testing::ThreadCount(daemon->pid());
  ASSERT_GT(before, 0);

  std::vector<uint64_t> graphs;
  for (int i = 0; i < kGraphs; ++i) {
    v1::RegisterGraphRequest request;
    request.set_session(session.session());
    v1::GraphDef& g = *request.mutable_graph();
    testing::AddF32Tensor(g, 0, testing::kRawOpNone, {}, {kK, kM});
    testing::AddF32Tensor(g, 1, testing::kRawOpNone, {}, {kK, kN});
    testing::AddF32Tensor(g, 2, testing::kRawOpMulMat, {0, 1}, {kM, kN});
    v1::RegisterGraphResponse registered;
    grpc::Status s = stub->RegisterGraph(Ctx().get(), request, &registered);
    ASSERT_TRUE(s.ok()) << i << ": " << s.error_message();
    graphs.push_back(registered.graph());
  }

  // Graph i computes a = i, b = 1 (elementwise): every output is 64 i.
  std::vector<float> ones(kK * kN, 1.0f);
  grpc::ClientContext execute_context;
  auto stream = stub->Execute(&execute_context);
  for (int i = 0; i < kGraphs; ++i) {
    v1::ExecuteRequest request;
    request.set_session(session.session());
    request.set_graph(graphs[i]);
    request.set_tag(i);
    v1::TensorData* a = request.add_inputs();
    a->set_id(0);
    a->set_data(Floats(std::vector<float>(kK * kM, static_cast<float>(i))));
    v1::TensorData* b = request.add_inputs();
    b->set_id(1);
    b->set_data(Floats(ones));
    request.add_outputs(2);
    ASSERT_TRUE(stream->Write(request)) << i;
  }
  int peak = before;
  for (int i = 0; i < kGraphs; ++i) {
    v1::ExecuteResponse response;
    ASSERT_TRUE(stream->Read(&response)) << i;
    ASSERT_EQ(response.status_code(), 0) << response.status_message();
    ASSERT_EQ(response.outputs_size(), 1);
    const std::string& data = response.outputs(0).data();
    ASSERT_EQ(data.size(), kM * kN * sizeof(float));
    std::vector<float> out(kM * kN);
    std::memcpy(out.data(), data.data(), data.size());
    const float want = static_cast<float>(kK * response.tag());
    for (float v : out) ASSERT_EQ(v, want) << "graph " << response.tag();
    peak = std::max(peak, testing::ThreadCount(daemon->pid()));
  }
  stream->WritesDone();

  // The streams just used still hold threads; idle, they give them back.
  EXPECT_GT(peak, before);
  const int after = testing::WaitForThreadCount(daemon->pid(), before + kSlack,
                                                absl::Seconds(10));
  RecordProperty("threads_before", before);
  RecordProperty("threads_peak", peak);
  RecordProperty("threads_after", after);
  EXPECT_LE(after, before + kSlack)
      << "threads before " << before << ", at the peak " << peak << ", with "
      << kGraphs << " idle registered graphs " << after;
  EXPECT_TRUE(daemon->IsRunning());
}

}  // namespace
}  // namespace tessera
