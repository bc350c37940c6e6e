// Operating a real tesserad: bearer tokens, TLS and mutual TLS, refusing
// to listen beyond loopback unprotected, memory quotas, health and
// reflection, metrics, the weight cache and the drain on SIGTERM.

#include <arpa/inet.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <atomic>
#include <optional>
#include <thread>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/raw_stream_call.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/metrics_scrape.h"
#include "tests/integration/shell.h"
#include "tests/integration/test_certs.h"

namespace tessera {
namespace {

using client::Client;
using client::ClientOptions;
using grpc::health::v1::HealthCheckResponse;
using testing::Curl;
using testing::DaemonProcess;
using testing::FreePort;
using testing::Scrape;

ClientOptions Quick() {
  ClientOptions options;
  options.connect_timeout = absl::Seconds(3);
  return options;
}

// The daemon's health as gRPC's health service reports it.
HealthCheckResponse::ServingStatus Health(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  HealthCheckResponse response;
  if (!stub->Check(&context, request, &response).ok()) {
    return HealthCheckResponse::UNKNOWN;
  }
  return response.status();
}

TEST(OperationsTest, EveryCallNeedsTheToken) {
  const std::string token_file = testing::WriteTempFile("token", "s3cret-token\n");
  auto daemon = DaemonProcess::Start({"--devices=cpu:1",
                                      absl::StrCat("--token_file=", token_file)})
                    .value();
  absl::StatusOr<std::unique_ptr<Client>> none =
      Client::Connect(daemon->address(), Quick());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(none.status().message().find("refused the credentials"),
            absl::string_view::npos)
      << none.status();
  ClientOptions wrong = Quick();
  wrong.token = "s3cret-tokem";
  EXPECT_EQ(Client::Connect(daemon->address(), wrong).status().code(),
            absl::StatusCode::kUnauthenticated);

  ClientOptions right = Quick();
  right.token = "s3cret-token";
  auto client = Client::Connect(daemon->address(), right).value();
  ASSERT_TRUE(client->ListDevices().ok());

  // A valid session id without the token is still refused.
  auto stub = v1::Tessera::NewStub(grpc::CreateChannel(
      daemon->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::ListDevicesRequest request;
  request.set_session(client->session());
  v1::ListDevicesResponse response;
  EXPECT_EQ(stub->ListDevices(&context, request, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // Health needs no token.
  EXPECT_EQ(Health(daemon->address()), HealthCheckResponse::SERVING);
}

TEST(OperationsTest, TlsAndMutualTls) {
  auto certs = testing::MakeTestCerts();
  ASSERT_TRUE(certs.ok()) << certs.status();
  ClientOptions tls = Quick();
  tls.tls = true;
  tls.tls_root_certs = certs->ca;
  {
    auto daemon = DaemonProcess::Start(
                      {"--devices=cpu:1",
                       absl::StrCat("--tls_cert=", certs->server_pem),
                       absl::StrCat("--tls_key=", certs->server_key)})
                      .value();
    auto client = Client::Connect(daemon->address(), tls);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_TRUE((*client)->ListDevices().ok());
    // Plaintext to the TLS port fails cleanly, and the daemon carries on.
    absl::Status plain = Client::Connect(daemon->address(), Quick()).status();
    EXPECT_EQ(plain.code(), absl::StatusCode::kUnavailable) << plain;
    EXPECT_NE(plain.message().find("cannot reach the daemon"),
              absl::string_view::npos);
    // A client that does not trust the server's CA is refused too.
    ClientOptions untrusted = tls;
    untrusted.tls_root_certs = certs->client_cert;
    EXPECT_FALSE(Client::Connect(daemon->address(), untrusted).ok());
    EXPECT_TRUE((*client)->ListDevices().ok());
  }
  auto daemon =
      DaemonProcess::Start({"--devices=cpu:1",
                            absl::StrCat("--tls_cert=", certs->server_pem),
                            absl::StrCat("--tls_key=", certs->server_key),
                            absl::StrCat("--tls_client_ca=", certs->ca_pem)})
          .value();
  EXPECT_EQ(Client::Connect(daemon->address(), tls).status().code(),
            absl::StatusCode::kUnavailable);
  ClientOptions mutual = tls;
  mutual.tls_client_cert = certs->client_cert;
  mutual.tls_client_key = certs->client_key_text;
  auto client = Client::Connect(daemon->address(), mutual);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->ListDevices().ok());
}

TEST(OperationsTest, RefusesToListenBeyondLoopbackUnprotected) {
  const std::string log = ::testing::TempDir() + "/refused.log";
  const int status = std::system(
      absl::StrCat(testing::TesseradPath().value(),
                   " --listen=0.0.0.0:0 --devices=cpu:1 >", log, " 2>&1")
          .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(testing::ReadFile(log).find("neither TLS nor a token"),
            std::string::npos)
      << testing::ReadFile(log);
}

// An empty or misspelled boolean is no "true": the daemon refuses to start
// and says which variable and what it wants, rather than opening a wildcard
// plaintext listener.
TEST(OperationsTest, RefusesToStartOnABooleanItDoesNotKnow) {
  const std::string log = ::testing::TempDir() + "/boolean.log";
  for (const char* value : {"", "yes", "on"}) {
    const int status = std::system(
        absl::StrCat("TESSERA_INSECURE='", value, "' ",
                     testing::TesseradPath().value(),
                     " --listen=0.0.0.0:0 --devices=cpu:1 >", log, " 2>&1")
            .c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_NE(WEXITSTATUS(status), 0) << value;
    const std::string said = testing::ReadFile(log);
    EXPECT_NE(said.find("$TESSERA_INSECURE"), std::string::npos) << said;
    EXPECT_NE(said.find("true, 1, false or 0"), std::string::npos) << said;
    EXPECT_EQ(said.find("tesserad listening on"), std::string::npos) << said;
  }
}

TEST(OperationsTest, QuotaExceededIsResourceExhaustedAndTheSessionGoesOn) {
  auto daemon = DaemonProcess::Start(
                    {"--devices=cpu:1", "--session_memory_quota=3M"})
                    .value();
  auto client = Client::Connect(daemon->address(), Quick()).value();
  EXPECT_EQ(client->limits().session_memory_quota(), uint64_t{3} << 20);
  auto first =
      client->AllocBuffer("cpu0", 2 << 20, BufferUsage::kWeights).value();
  absl::StatusOr<client::RemoteBufferInfo> second =
      client->AllocBuffer("cpu0", 2 << 20, BufferUsage::kWeights);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("3145728"), absl::string_view::npos)
      << second.status();
  // Another session has its own quota.
  auto other = Client::Connect(daemon->address(), Quick()).value();
  EXPECT_TRUE(
      other->AllocBuffer("cpu0", 2 << 20, BufferUsage::kWeights).ok());
  ASSERT_TRUE(client->FreeBuffer(first.handle).ok());
  EXPECT_TRUE(
      client->AllocBuffer("cpu0", 2 << 20, BufferUsage::kWeights).ok());
}

TEST(OperationsTest, MetricsMoveWithTraffic) {
  const int port = FreePort();
  auto daemon =
      DaemonProcess::Start({"--devices=cpu:1",
                            absl::StrCat("--metrics_listen=127.0.0.1:", port)})
          .value();
  auto client = Client::Connect(daemon->address(), Quick()).value();
  std::map<std::string, double> before = Scrape(port);
  EXPECT_EQ(before["tessera_sessions"], 1);
  EXPECT_GT(before["tessera_device_memory_total_bytes{device=\"cpu0\"}"], 0);

  constexpr uint64_t kBytes = 3 << 20;
  auto buffer =
      client->AllocBuffer("cpu0", kBytes, BufferUsage::kWeights).value();
  std::vector<char> data(kBytes, 7), back(kBytes);
  v1::TensorRef ref;
  ref.set_buffer(buffer.handle);
  ASSERT_TRUE(client->WriteTensor(ref, data.data(), kBytes).ok());
  ASSERT_TRUE(client->ReadTensor(ref, back.data(), kBytes).ok());
  EXPECT_EQ(client->FreeBuffer(0).code(), absl::StatusCode::kNotFound);

  std::map<std::string, double> after = Scrape(port);
  EXPECT_EQ(after["tessera_received_bytes_total"] -
                before["tessera_received_bytes_total"],
            kBytes);
  EXPECT_EQ(after["tessera_sent_bytes_total"] -
                before["tessera_sent_bytes_total"],
            kBytes);
  const std::string write =
      "tessera_rpcs_total{method=\"/tessera.v1.Tessera/WriteTensor\","
      "code=\"OK\"}";
  EXPECT_EQ(after[write] - before[write], 1);
  const std::string not_found =
      "tessera_rpcs_total{method=\"/tessera.v1.Tessera/FreeBuffer\","
      "code=\"NOT_FOUND\"}";
  EXPECT_EQ(after[not_found], 1);
  EXPECT_GE(after["tessera_rpc_duration_seconds_count{method=\"/tessera.v1."
                  "Tessera/AllocBuffer\"}"],
            1);
  EXPECT_EQ(Curl(absl::StrCat("http://127.0.0.1:", port, "/other")),
            "only /metrics is here.\n");
}

// Calls of methods the daemon does not serve, without the token, add no
// series: they share method="other". A client sending its request a byte a
// second does not hold up scrapes.
TEST(OperationsTest, MetricsStayBoundedAndAnswerBesideASlowClient) {
  const std::string token_file = testing::WriteTempFile("token2", "t0ken\n");
  const int port = FreePort();
  auto daemon =
      DaemonProcess::Start({"--devices=cpu:1",
                            absl::StrCat("--token_file=", token_file),
                            absl::StrCat("--metrics_listen=127.0.0.1:", port)})
          .value();
  constexpr int kCalls = 30;
  grpc::GenericStub generic(grpc::CreateChannel(
      daemon->address(), grpc::InsecureChannelCredentials()));
  grpc::CompletionQueue cq;
  for (int i = 0; i < kCalls; ++i) {
    grpc::ClientContext context;
    grpc::ByteBuffer request, response;
    grpc::Status status;
    auto call = generic.PrepareUnaryCall(
        &context, absl::StrCat("/made.up.Service/Method", i), request, &cq);
    call->StartCall();
    call->Finish(&response, &status, nullptr);
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_FALSE(status.ok());
  }
  cq.Shutdown();

  std::atomic<bool> stop{false};
  std::thread slow([&] {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    for (size_t i = 0; i < request.size() && !stop; ++i) {
      send(fd, &request[i], 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    close(fd);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::map<std::string, double> series = Scrape(port);
  stop = true;
  slow.join();
  for (const auto& [name, value] : series) {
    EXPECT_EQ(name.find("made.up"), std::string::npos) << name;
  }
  EXPECT_EQ(series["tessera_rpcs_total{method=\"other\",code=\"UNAUTHENTICATED\"}"] +
                series["tessera_rpcs_total{method=\"other\",code=\"UNIMPLEMENTED\"}"],
            kCalls);
}

TEST(OperationsTest, ASecondUploadOfTheSameWeightsSendsNoBytes) {
  constexpr uint64_t kBytes = uint64_t{256} << 20;
  std::vector<char> weights(kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) weights[i] = static_cast<char>(i * 7);
  const std::string cache_dir = ::testing::TempDir() + "/weight-cache";
  std::filesystem::remove_all(cache_dir);
  // Uploads the weights in a new session; returns the tensor bytes the
  // daemon received meanwhile, after checking what it holds.
  auto load = [&](int port, const std::string& address) -> double {
    const double before = Scrape(port)["tessera_received_bytes_total"];
    auto client = Client::Connect(address, Quick()).value();
    auto buffer =
        client->AllocBuffer("cpu0", kBytes, BufferUsage::kWeights).value();
    v1::TensorRef ref;
    ref.set_buffer(buffer.handle);
    EXPECT_TRUE(client->WriteTensorCached(ref, weights.data(), kBytes).ok());
    std::vector<char> back(kBytes);
    EXPECT_TRUE(client->ReadTensor(ref, back.data(), kBytes).ok());
    EXPECT_TRUE(back == weights);
    return Scrape(port)["tessera_received_bytes_total"] - before;
  };
  auto start = [&](int port) {
    return DaemonProcess::Start(
               {"--devices=cpu:1",
                absl::StrCat("--metrics_listen=127.0.0.1:", port),
                absl::StrCat("--cache_dir=", cache_dir)})
        .value();
  };
  {
    const int port = FreePort();
    auto daemon = start(port);
    EXPECT_EQ(load(port, daemon->address()), kBytes);
    EXPECT_EQ(load(port, daemon->address()), 0);  // from memory
  }
  {
    const int port = FreePort();
    auto daemon = start(port);
    EXPECT_EQ(load(port, daemon->address()), 0);  // from the cache directory
  }
  // A damaged cache file is rejected: the bytes are sent again.
  for (const auto& entry : std::filesystem::directory_iterator(cache_dir)) {
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    f.put('\x55');
  }
  const int port = FreePort();
  auto daemon = start(port);
  EXPECT_EQ(load(port, daemon->address()), kBytes);
}

TEST(OperationsTest, ReflectionListsTheServices) {
  auto daemon = DaemonProcess::Start({"--devices=cpu:1"}).value();
  auto channel =
      grpc::CreateChannel(daemon->address(), grpc::InsecureChannelCredentials());
  // ServerReflectionRequest{list_services: "*"} (field 7), encoded by hand.
  const std::string request("\x3a\x01*", 3);
  bool sent = false;
  std::string answer;
  absl::Status status = client::RunRawStreamCall(
      *channel, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      {.next_write = [&]() -> std::optional<grpc::ByteBuffer> {
         if (sent) return std::nullopt;
         sent = true;
         grpc::Slice slice(request);
         return grpc::ByteBuffer(&slice, 1);
       },
       .on_read = [&](const grpc::ByteBuffer& message) {
         std::vector<grpc::Slice> slices;
         EXPECT_TRUE(message.Dump(&slices).ok());
         for (const grpc::Slice& s : slices) {
           answer.append(reinterpret_cast<const char*>(s.begin()), s.size());
         }
         return absl::OkStatus();
       }});
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_NE(answer.find("tessera.v1.Tessera"), std::string::npos) << answer;
  EXPECT_NE(answer.find("grpc.health.v1.Health"), std::string::npos) << answer;
}

// SIGTERM while a long compute runs: health turns NOT_SERVING and new
// sessions are refused while the compute goes on; the compute completes and
// its client gets the result; the daemon exits 0.
TEST(OperationsTest, SigtermLetsTheComputeInFlightFinish) {
  const int port = FreePort();
  auto daemon =
      DaemonProcess::Start({"--devices=cpu:1", "--threads=1",
                            "--drain_timeout=300s",
                            absl::StrCat("--metrics_listen=127.0.0.1:", port)})
          .value();
  auto client = Client::Connect(daemon->address(), Quick()).value();

  // z = I * (I * (... * y)): many products, each exact, so z == y.
  constexpr int64_t n = 512;
  constexpr int kProducts = 1000;
  Context ctx;
  Tensor* eye = ctx.NewTensor(Type::kF32, {n, n}).value();
  Tensor* y = ctx.NewTensor(Type::kF32, {n, n}).value();
  eye->flags |= kFlagInput;
  y->flags |= kFlagInput;
  Tensor* z = y;
  for (int i = 0; i < kProducts; ++i) z = MulMat(ctx, eye, z).value();
  z->flags |= kFlagOutput;
  Graph graph;
  ASSERT_TRUE(graph.Expand(z).ok());
  std::vector<float> eye_data(n * n, 0.0f), y_data(n * n), z_data(n * n, -1.0f);
  for (int64_t i = 0; i < n; ++i) eye_data[i * n + i] = 1.0f;
  for (int64_t i = 0; i < n * n; ++i) y_data[i] = static_cast<float>(i % 97) - 48;

  std::atomic<bool> done{false};
  absl::Status compute_status;
  std::thread compute([&] {
    compute_status = client->Compute(
        graph,
        {{eye, eye_data.data(), eye_data.size() * sizeof(float)},
         {y, y_data.data(), y_data.size() * sizeof(float)}},
        {{z, z_data.data(), z_data.size() * sizeof(float)}});
    done = true;
  });
  // Signal once the daemon reports the compute at work.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (Scrape(port)["tessera_work_in_flight"] < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_FALSE(done) << "the compute ended before the signal: "
                     << compute_status;
  ASSERT_TRUE(daemon->Kill(SIGTERM).ok());

  bool not_serving_while_computing = false;
  while (!done) {
    if (Health(daemon->address()) == HealthCheckResponse::NOT_SERVING) {
      not_serving_while_computing = !done;
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(not_serving_while_computing);
  if (!done) {
    absl::StatusOr<std::unique_ptr<Client>> late =
        Client::Connect(daemon->address(), Quick());
    EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable)
        << late.status();
  }
  compute.join();
  ASSERT_TRUE(compute_status.ok()) << compute_status;
  EXPECT_EQ(z_data, y_data);
  absl::StatusOr<int> wait_status = daemon->Wait(absl::Seconds(60));
  ASSERT_TRUE(wait_status.ok()) << wait_status.status();
  EXPECT_TRUE(WIFEXITED(*wait_status) && WEXITSTATUS(*wait_status) == 0)
      << *wait_status;
}

}  // namespace
}  // namespace tessera
