// Fair service against a real tesserad: one session with a backlog of long
// Computes does not hold up another session's short call, which waits for
// at most one running job rather than for the backlog.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera.grpc.pb.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_graph.h"
#include "tests/integration/metrics_scrape.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;


std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(120));
  return ctx;
}

std::string Hello(v1::Tessera::Stub& stub, const std::string& name) {
  v1::HelloRequest request;
  request.set_min_version(1);
  request.set_max_version(1);
  request.set_client_name(name);
  v1::HelloResponse response;
  EXPECT_TRUE(stub.Hello(Ctx().get(), request, &response).ok());
  return response.session();
}


// x <- a x, kLayers times, with a [kDim, kDim] and x [kDim, kDim]: a long
// compute (about 4 GFLOP on one thread, tens of milliseconds: long next to
// the time a response takes to reach its client thread).
v1::ComputeRequest LongCompute(const std::string& session) {
  constexpr int64_t kDim = 512;
  constexpr uint32_t kLayers = 16;
  v1::GraphDef g;
  testing::AddF32Tensor(g, 0, testing::kRawOpNone, {}, {kDim, kDim});
  testing::AddF32Tensor(g, 1, testing::kRawOpNone, {}, {kDim, kDim});
  for (uint32_t i = 0; i < kLayers; ++i) {
    testing::AddF32Tensor(g, i + 2, testing::kRawOpMulMat, {0, i + 1},
                          {kDim, kDim});
  }
  return testing::WithZeroInputs(session, g, kLayers + 1);
}

v1::ComputeRequest ShortCompute(const std::string& session) {
  v1::GraphDef g;
  testing::AddF32Tensor(g, 0, testing::kRawOpNone, {}, {4});
  testing::AddF32Tensor(g, 1, testing::kRawOpAdd, {0, 0}, {4});
  return testing::WithZeroInputs(session, g, 1);
}

TEST(FairnessTest, ShortCallOfAnotherSessionDoesNotWaitForABacklog) {
  constexpr int kBacklog = 24;
  const int port = testing::FreePort();
  auto daemon = testing::DaemonProcess::Start(
                    {"--devices=cpu:1", "--threads=1",
                     absl::StrCat("--metrics_listen=127.0.0.1:", port)})
                    .value();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto stub = v1::Tessera::NewStub(grpc::CreateCustomChannel(
      daemon->address(), grpc::InsecureChannelCredentials(), args));
  const std::string a = Hello(*stub, "backlog");
  const std::string b = Hello(*stub, "short");
  const double idle = testing::Scrape(port)["tessera_work_in_flight"];

  // Session A queues its backlog, each call on a thread of its own.
  std::atomic<int> a_done{0};
  std::vector<std::thread> backlog;
  for (int i = 0; i < kBacklog; ++i) {
    backlog.emplace_back([&] {
      v1::ComputeResponse response;
      grpc::Status s =
          stub->Compute(Ctx().get(), LongCompute(a), &response);
      EXPECT_TRUE(s.ok()) << s.error_message();
      ++a_done;
    });
  }
  // Until the daemon holds the whole backlog (received, not yet answered).
  while (testing::Scrape(port)["tessera_work_in_flight"] - idle <
             kBacklog - a_done.load() &&
         a_done.load() < kBacklog) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const int done_before_b = a_done.load();

  v1::ComputeResponse response;
  grpc::Status s = stub->Compute(Ctx().get(), ShortCompute(b), &response);
  const int done_after_b = a_done.load();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).data(), std::string(16, '\0'));
  for (std::thread& t : backlog) t.join();

  // B came while most of A's backlog waited in the daemon, and finished
  // after at most the one job running when it came (and the one after it,
  // should that start before B's turn is taken); a FIFO would have run the
  // whole backlog first.
  ASSERT_LE(done_before_b, kBacklog / 2);
  EXPECT_LE(done_after_b - done_before_b, 2);
}

}  // namespace
}  // namespace tessera
