// Execute and Attach streams against a real tesserad: an execution's error
// is its own; one message carries several executions each way; Flush sends
// what Submit holds, and over protocol version 1 Submit holds nothing; one
// thread submits while another receives; Execute over a Unix socket; a
// stream whose daemon died fails cleanly; idle streams cost the daemon no
// threads; responses the client does not read count against its session's
// quota; the stream cap; the DRAINING event and --drain_timeout on SIGTERM.

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "backend/alloc/tensor_allocator.h"
#include "client/client.h"
#include "client/graph_encoder.h"
#include "client/remote_device.h"
#include "client/remote_graph.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera.grpc.pb.h"
#include "tests/integration/daemon_process.h"

namespace tessera {
namespace {

using client::Client;
using client::RemoteGraph;
using testing::DaemonProcess;

// The daemon's thread count (/proc/PID/status).
int Threads(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

std::unique_ptr<v1::Tessera::Stub> NewStub(const std::string& address,
                                           int channel) {
  grpc::ChannelArguments args;
  // A connection of its own (not one shared by equal channels).
  args.SetInt("tessera.test.channel", channel);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(-1);
  return v1::Tessera::NewStub(grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args));
}

// An open Execute stream and its context.
struct OpenStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ExecuteRequest,
                                           v1::ExecuteResponse>>
      stream;
};

// Opens a stream and makes one round trip on it (an execution for no
// session), so the daemon surely holds it; returns that response's code.
grpc::StatusCode OpenAndProbe(v1::Tessera::Stub& stub, OpenStream& open) {
  open.stream = stub.Execute(&open.context);
  v1::ExecuteRequest request;
  request.set_session("no-such-session");
  request.set_tag(1);
  v1::ExecuteResponse response;
  if (!open.stream->Write(request) || !open.stream->Read(&response)) {
    return open.stream->Finish().error_code();
  }
  return static_cast<grpc::StatusCode>(response.status_code());
}

// out = rows b of a: a is kCols x kRows floats, b kPicks row indices.
constexpr int64_t kCols = 4;
constexpr int64_t kRows = 8;
constexpr int64_t kPicks = 3;

// The graph out = GET_ROWS(a, b), a and b its inputs.
struct PickRows {
  PickRows() {
    a = ctx.NewTensor(Type::kF32, {kCols, kRows}).value();
    b = ctx.NewTensor(Type::kI32, {kPicks}).value();
    a->flags |= kFlagInput;
    b->flags |= kFlagInput;
    out = GetRows(ctx, a, b).value();
    EXPECT_TRUE(graph.Expand(out).ok());
  }
  // Values of a: first, first + 1, ...
  static std::vector<float> Values(float first) {
    std::vector<float> a;
    for (int64_t i = 0; i < kCols * kRows; ++i) a.push_back(first + i);
    return a;
  }
  // Expects `got` to hold rows `b` of `a`.
  static void ExpectPicked(const std::vector<float>& got,
                           const std::vector<float>& a,
                           const std::vector<int32_t>& b) {
    for (int64_t r = 0; r < kPicks; ++r) {
      for (int64_t c = 0; c < kCols; ++c) {
        EXPECT_EQ(got[r * kCols + c], a[b[r] * kCols + c])
            << "row " << r << " col " << c;
      }
    }
  }
  Context ctx;
  Tensor *a, *b, *out;
  Graph graph;
};

TEST(ExecuteStreamTest, AnExecutionsErrorIsItsOwn) {
  auto daemon =
      DaemonProcess::Start({"--devices=cpu:1", "--threads=1"}).value();
  auto client = Client::Connect(daemon->address()).value();
  PickRows g;
  auto remote =
      RemoteGraph::Register(*client, g.graph, {.n_copies = 2}).value();

  // Every execution is sent before any result is read, so they pipeline;
  // executions 6 and 7 pick a row that does not exist.
  constexpr int kExecutions = 16;
  auto bad_row = [](int k) { return k == 6 ? 100 : k == 7 ? 200 : -1; };
  std::vector<std::vector<float>> as(kExecutions);
  std::vector<std::vector<int32_t>> bs(kExecutions);
  for (int k = 0; k < kExecutions; ++k) {
    as[k] = PickRows::Values(k * 1000);
    bs[k] = {int32_t(k % kRows), int32_t((k + 3) % kRows), 5};
    if (bad_row(k) >= 0) bs[k][1] = bad_row(k);
    ASSERT_TRUE(
        remote
            ->Submit({{g.a, as[k].data(), as[k].size() * sizeof(float)},
                      {g.b, bs[k].data(), bs[k].size() * sizeof(int32_t)}},
                     {g.out})
            .ok());
  }
  for (int k = 0; k < kExecutions; ++k) {
    std::vector<float> got(kCols * kPicks, -1.0f);
    absl::Status s =
        remote->Receive({{g.out, got.data(), got.size() * sizeof(float)}});
    if (bad_row(k) >= 0) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k << ": " << s;
      EXPECT_NE(s.message().find(absl::StrCat("row index ", bad_row(k))),
                std::string::npos)
          << k << ": " << s;
      continue;
    }
    ASSERT_TRUE(s.ok()) << "execution " << k << ": " << s;
    SCOPED_TRACE(absl::StrCat("execution ", k));
    PickRows::ExpectPicked(got, as[k], bs[k]);
  }
}

// The executions read back from an Execute stream, the messages flattened;
// how many messages came and the most responses one carried.
std::vector<v1::ExecuteResponse> ReadAll(OpenStream& open, int* messages,
                                         int* largest) {
  std::vector<v1::ExecuteResponse> responses;
  v1::ExecuteResponse message;
  *messages = 0;
  *largest = 0;
  while (open.stream->Read(&message)) {
    ++*messages;
    *largest = std::max(*largest, 1 + message.more_size());
    google::protobuf::RepeatedPtrField<v1::ExecuteResponse> more;
    more.Swap(message.mutable_more());
    responses.push_back(message);
    for (const v1::ExecuteResponse& response : more) {
      EXPECT_EQ(response.more_size(), 0);
      responses.push_back(response);
    }
  }
  return responses;
}

// Sixteen executions in one message (the later fifteen in `more`) run in
// order; their responses come in order, several to a message but at most
// as many as the client allows (max_responses_per_message), and one per
// message where it allows none.
TEST(ExecuteStreamTest, OneMessageCarriesSeveralExecutionsEachWay) {
  auto daemon =
      DaemonProcess::Start({"--devices=cpu:1", "--threads=1"}).value();
  auto client = Client::Connect(daemon->address()).value();
  PickRows g;
  auto remote = RemoteGraph::Register(*client, g.graph, {}).value();
  // The tensors' ids on the wire, as Register sent them.
  const client::EncodedGraph encoded =
      client::EncodeGraph(g.graph, *client, /*require_data=*/false).value();
  auto stub = NewStub(daemon->address(), 0);
  constexpr int kExecutions = 16;
  std::vector<std::vector<float>> as;
  for (int k = 0; k < kExecutions; ++k) {
    as.push_back(PickRows::Values(k * 100));
  }
  const std::vector<int32_t> bs = {6, 1, 3};
  // Once run, the daemon knows the graph for a short one.
  std::vector<float> first(kCols * kPicks);
  ASSERT_TRUE(remote
                  ->Run({{g.a, as[0].data(), as[0].size() * sizeof(float)},
                         {g.b, bs.data(), bs.size() * sizeof(int32_t)}},
                        {{g.out, first.data(), first.size() * sizeof(float)}})
                  .ok());
  for (uint32_t allowed : {0u, 8u}) {
    SCOPED_TRACE(allowed);
    v1::ExecuteRequest message;
    for (int k = 0; k < kExecutions; ++k) {
      v1::ExecuteRequest& request = k == 0 ? message : *message.add_more();
      request.set_session(client->session());
      request.set_graph(remote->handle());
      request.set_tag(k);
      v1::TensorData* a = request.add_inputs();
      a->set_id(encoded.IdOf(g.a).value());
      a->set_data(as[k].data(), as[k].size() * sizeof(float));
      v1::TensorData* b = request.add_inputs();
      b->set_id(encoded.IdOf(g.b).value());
      b->set_data(bs.data(), bs.size() * sizeof(int32_t));
      request.add_outputs(encoded.IdOf(g.out).value());
    }
    message.set_max_responses_per_message(allowed);
    OpenStream open;
    open.stream = stub->Execute(&open.context);
    ASSERT_TRUE(open.stream->Write(message));
    open.stream->WritesDone();
    int messages = 0, largest = 0;
    const std::vector<v1::ExecuteResponse> responses =
        ReadAll(open, &messages, &largest);
    EXPECT_TRUE(open.stream->Finish().ok());
    if (allowed == 0) {
      EXPECT_EQ(messages, kExecutions);
    } else {
      EXPECT_LT(messages, kExecutions);
      EXPECT_LE(largest, int(allowed));
    }
    ASSERT_EQ(responses.size(), size_t{kExecutions});
    for (int k = 0; k < kExecutions; ++k) {
      const v1::ExecuteResponse& response = responses[k];
      EXPECT_EQ(response.tag(), uint64_t(k));
      ASSERT_EQ(response.status_code(), 0) << response.status_message();
      ASSERT_EQ(response.outputs_size(), 1);
      const std::string& data = response.outputs(0).data();
      ASSERT_EQ(data.size(), kCols * kPicks * sizeof(float));
      std::vector<float> got(kCols * kPicks);
      std::memcpy(got.data(), data.data(), data.size());
      SCOPED_TRACE(absl::StrCat("execution ", k));
      PickRows::ExpectPicked(got, as[k], bs);
    }
  }
}

// Submits three executions of a graph that copies its input into a buffer
// of the session's, so the buffer shows which have run before any result
// is received, calling Flush after them when `flush`; the last one runs
// within seconds, and the results then come in order. The client offers
// protocol versions up to `max_version`.
void ExpectAllRunBeforeAnyReceive(uint32_t max_version, bool flush) {
  auto daemon =
      DaemonProcess::Start({"--devices=cpu:1", "--threads=1"}).value();
  auto client =
      Client::Connect(daemon->address(), {.max_version = max_version})
          .value();
  ASSERT_EQ(client->version(), max_version);
  auto devices = client::RemoteDevice::ListAll(*client).value();
  Context ctx;
  Tensor* x = ctx.NewTensor(Type::kF32, {4}).value();
  x->flags |= kFlagInput;
  Tensor* kept = ctx.NewTensor(Type::kF32, {4}).value();
  kept->name = "kept";
  auto buffer = AllocTensors(devices[0]->buffer_type(), {kept}).value();
  Tensor* y = Cpy(ctx, x, kept).value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(y).ok());
  auto remote = RemoteGraph::Register(*client, graph, {}).value();

  constexpr int kExecutions = 3;
  std::vector<std::vector<float>> xs;
  for (int k = 0; k < kExecutions; ++k) {
    xs.push_back(std::vector<float>(4, 10.0f * (k + 1)));
    ASSERT_TRUE(remote->Submit({{x, xs[k].data(), 16}}, {y}).ok());
  }
  // Copies in `kept` within the deadline once `want` has run.
  std::vector<float> seen(4);
  auto await = [&](const std::vector<float>& want) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    do {
      absl::SleepFor(absl::Milliseconds(20));
      ASSERT_TRUE(kept->buffer->GetTensor(*kept, seen.data(), 0, 16).ok());
    } while (seen != want && absl::Now() < deadline);
  };
  if (flush) {
    // The first is sent and runs; the others wait in the client.
    await(xs[0]);
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_TRUE(kept->buffer->GetTensor(*kept, seen.data(), 0, 16).ok());
    EXPECT_EQ(seen, xs[0]);
    ASSERT_TRUE(remote->Flush().ok());
  }
  await(xs.back());
  EXPECT_EQ(seen, xs.back());
  for (int k = 0; k < kExecutions; ++k) {
    std::vector<float> got(4);
    ASSERT_TRUE(remote->Receive({{y, got.data(), 16}}).ok());
    EXPECT_EQ(got, xs[k]);
  }
}

// Submit holds an execution while an earlier one is unanswered; Flush sends
// it.
TEST(ExecuteStreamTest, FlushSendsTheExecutionsSubmitHolds) {
  ExpectAllRunBeforeAnyReceive(2, /*flush=*/true);
}

// Over protocol version 1 a message carries one execution: Submit sends
// each at once.
TEST(ExecuteStreamTest, OverProtocolVersion1SubmitSendsEachAtOnce) {
  ExpectAllRunBeforeAnyReceive(1, /*flush=*/false);
}

TEST(ExecuteStreamTest, ExecutesOverAUnixSocket) {
  auto daemon = DaemonProcess::Start({"--devices=cpu:1", "--threads=1"},
                                     absl::Seconds(120),
                                     DaemonProcess::Listen::kUnix)
                    .value();
  ASSERT_EQ(daemon->address().rfind("unix:", 0), 0u) << daemon->address();
  auto client = Client::Connect(daemon->address()).value();
  PickRows g;
  auto remote = RemoteGraph::Register(*client, g.graph, {}).value();
  const std::vector<float> as = PickRows::Values(0);
  const std::vector<int32_t> bs = {7, 0, 2};
  std::vector<float> got(kCols * kPicks);
  ASSERT_TRUE(remote
                  ->Run({{g.a, as.data(), as.size() * sizeof(float)},
                         {g.b, bs.data(), bs.size() * sizeof(int32_t)}},
                        {{g.out, got.data(), got.size() * sizeof(float)}})
                  .ok());
  PickRows::ExpectPicked(got, as, bs);
}

// When the daemon dies under a registered graph, its stream fails every
// later call with UNAVAILABLE and ends once: the client process goes on
// (gRPC aborts a process that finishes a stream twice or reads after).
TEST(ExecuteStreamTest, AStreamWhoseDaemonDiedFailsEveryCallAndEndsOnce) {
  auto daemon = DaemonProcess::Start({"--devices=cpu:1", "--threads=1"}).value();
  auto client = Client::Connect(daemon->address()).value();
  PickRows g;
  auto remote = RemoteGraph::Register(*client, g.graph, {}).value();
  std::vector<float> as(kCols * kRows, 1.0f);
  const std::vector<int32_t> bs = {7, 0, 2};
  std::vector<float> got(kCols * kPicks);
  const std::vector<client::TensorInput> inputs = {
      {g.a, as.data(), as.size() * sizeof(float)},
      {g.b, bs.data(), bs.size() * sizeof(int32_t)}};
  const std::vector<client::TensorOutput> outputs = {
      {g.out, got.data(), got.size() * sizeof(float)}};
  ASSERT_TRUE(remote->Run(inputs, outputs).ok());
  ASSERT_TRUE(daemon->Kill(SIGKILL).ok());
  ASSERT_TRUE(daemon->Wait(absl::Seconds(10)).ok());
  const absl::Status run = remote->Run(inputs, outputs);
  EXPECT_EQ(run.code(), absl::StatusCode::kUnavailable) << run;
  const absl::Status receive = remote->Receive(outputs);
  EXPECT_EQ(receive.code(), absl::StatusCode::kUnavailable) << receive;
  EXPECT_NE(receive.message().find("ended"), std::string::npos) << receive;
  const absl::Status submit = remote->Submit(inputs, {g.out});
  EXPECT_EQ(submit.code(), absl::StatusCode::kUnavailable) << submit;
  remote.reset();  // ends the stream without finishing it again
}

// A graph whose one output is kOutFloats floats: y = x + x, x its input.
constexpr int64_t kOutFloats = 256 << 10;  // 1 MiB

struct Doubled {
  Doubled() {
    x = ctx.NewTensor(Type::kF32, {kOutFloats}).value();
    x->flags |= kFlagInput;
    y = Add(ctx, x, x).value();
    EXPECT_TRUE(graph.Expand(y).ok());
  }
  Context ctx;
  Tensor *x, *y;
  Graph graph;
};

// One thread submits 100 executions of 1 MiB each way while another
// receives them: more than the daemon reads ahead (64), with results that
// fill the stream's window, so a Receive that waited for Submit's write
// would never return. Every result comes, in order.
TEST(ExecuteStreamTest, OneThreadSubmitsWhileAnotherReceives) {
  auto daemon =
      DaemonProcess::Start({"--devices=cpu:1", "--threads=1"}).value();
  auto client = Client::Connect(daemon->address()).value();
  Doubled g;
  auto remote =
      RemoteGraph::Register(*client, g.graph, {.n_copies = 1}).value();
  constexpr int kExecutions = 100;
  const uint64_t bytes = kOutFloats * sizeof(float);
  absl::Status received;
  int in_order = 0;
  std::thread receiver([&] {
    std::vector<float> got(kOutFloats);
    for (int k = 0; k < kExecutions; ++k) {
      received = remote->Receive({{g.y, got.data(), bytes}});
      if (!received.ok()) return;
      if (got.front() == 2.0f * k && got.back() == 2.0f * k) ++in_order;
    }
  });
  std::vector<float> in(kOutFloats);
  for (int k = 0; k < kExecutions; ++k) {
    std::fill(in.begin(), in.end(), static_cast<float>(k));
    ASSERT_TRUE(remote->Submit({{g.x, in.data(), bytes}}, {g.y}).ok());
  }
  receiver.join();
  EXPECT_TRUE(received.ok()) << received;
  EXPECT_EQ(in_order, kExecutions);
}

TEST(ExecuteStreamTest, UnreadResponsesCountAgainstTheQuota) {
  constexpr uint64_t kQuota = 24 << 20;
  auto daemon = DaemonProcess::Start({"--devices=cpu:1", "--threads=1",
                                      absl::StrCat("--session_memory_quota=",
                                                   kQuota)})
                    .value();
  auto client = Client::Connect(daemon->address()).value();
  Doubled g;
  auto remote =
      RemoteGraph::Register(*client, g.graph, {.n_copies = 1}).value();
  std::vector<float> in(kOutFloats, 1.5f);
  const uint64_t bytes = in.size() * sizeof(float);

  // 40 MiB of results, none read: those past the quota are refused.
  constexpr int kExecutions = 40;
  for (int k = 0; k < kExecutions; ++k) {
    ASSERT_TRUE(remote->Submit({{g.x, in.data(), bytes}}, {g.y}).ok());
  }
  ASSERT_TRUE(remote->Flush().ok());
  absl::SleepFor(absl::Seconds(1));
  // The held results leave no room for a buffer now.
  EXPECT_EQ(client->AllocBuffer("cpu0", 8 << 20, BufferUsage::kAny)
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  int ok = 0, refused = 0;
  for (int k = 0; k < kExecutions; ++k) {
    std::vector<float> got(kOutFloats);
    absl::Status s = remote->Receive({{g.y, got.data(), bytes}});
    if (s.ok()) {
      ++ok;
      EXPECT_EQ(got[kOutFloats - 1], 3.0f);
    } else {
      ++refused;
      EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      EXPECT_NE(s.message().find("quota"), std::string::npos) << s;
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_LT(ok, 24);
  EXPECT_GT(refused, 0);
  // Read, they are given back.
  std::vector<float> got(kOutFloats);
  EXPECT_TRUE(
      remote->Run({{g.x, in.data(), bytes}}, {{g.y, got.data(), bytes}}).ok());
  EXPECT_TRUE(client->AllocBuffer("cpu0", 8 << 20, BufferUsage::kAny).ok());
}

TEST(ExecuteStreamTest, StreamsPastTheCapAreRefused) {
  auto daemon = DaemonProcess::Start({"--devices=cpu:1", "--threads=1",
                                      "--max_execute_streams=3"})
                    .value();
  auto stub = NewStub(daemon->address(), 0);
  std::vector<std::unique_ptr<OpenStream>> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_unique<OpenStream>());
    EXPECT_EQ(OpenAndProbe(*stub, *streams.back()), grpc::StatusCode::NOT_FOUND);
  }
  auto extra = std::make_unique<OpenStream>();
  EXPECT_EQ(OpenAndProbe(*stub, *extra), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // One closes: a new one is taken.
  streams[0]->stream->WritesDone();
  EXPECT_TRUE(streams[0]->stream->Finish().ok());
  absl::SleepFor(absl::Milliseconds(200));
  auto again = std::make_unique<OpenStream>();
  EXPECT_EQ(OpenAndProbe(*stub, *again), grpc::StatusCode::NOT_FOUND);
  for (auto& open : streams) open->context.TryCancel();
  again->context.TryCancel();
}

// 500 idle Execute streams and a stream whose results the client does not
// read: the daemon's threads do not grow with them; on SIGTERM the Attach
// stream gets DRAINING and the daemon exits within --drain_timeout.
TEST(ExecuteStreamTest, IdleStreamsCostNoThreadsAndTheDrainKeepsItsTime) {
  auto daemon = DaemonProcess::Start({"--devices=cpu:1", "--threads=1",
                                      "--drain_timeout=2s"})
                    .value();
  auto client = Client::Connect(daemon->address()).value();

  // An Attach stream of a session of its own, read on a thread.
  auto attach_stub = NewStub(daemon->address(), 100);
  v1::HelloRequest hello;
  hello.set_min_version(1);
  hello.set_max_version(1);
  v1::HelloResponse session;
  grpc::ClientContext hello_context;
  ASSERT_TRUE(attach_stub->Hello(&hello_context, hello, &session).ok());
  grpc::ClientContext attach_context;
  v1::AttachRequest attach;
  attach.set_session(session.session());
  auto events = attach_stub->Attach(&attach_context, attach);
  std::atomic<bool> draining{false};
  std::thread reader([&] {
    v1::AttachEvent event;
    while (events->Read(&event)) {
      if (event.kind() == v1::AttachEvent::DRAINING) draining = true;
    }
  });

  // Work the daemon waits for at the drain: results nobody reads.
  Doubled g;
  auto remote =
      RemoteGraph::Register(*client, g.graph, {.n_copies = 1}).value();
  std::vector<float> in(kOutFloats, 1.0f);
  for (int k = 0; k < 48; ++k) {
    ASSERT_TRUE(
        remote->Submit({{g.x, in.data(), in.size() * sizeof(float)}}, {g.y})
            .ok());
  }
  ASSERT_TRUE(remote->Flush().ok());

  absl::SleepFor(absl::Milliseconds(300));
  const int threads_before = Threads(daemon->pid());
  constexpr int kChannels = 10;
  constexpr int kStreamsPerChannel = 50;
  std::vector<std::unique_ptr<v1::Tessera::Stub>> stubs;
  std::vector<std::unique_ptr<OpenStream>> streams;
  for (int c = 0; c < kChannels; ++c) {
    stubs.push_back(NewStub(daemon->address(), c));
    for (int i = 0; i < kStreamsPerChannel; ++i) {
      streams.push_back(std::make_unique<OpenStream>());
      ASSERT_EQ(OpenAndProbe(*stubs.back(), *streams.back()),
                grpc::StatusCode::NOT_FOUND);
    }
  }
  const int threads_after = Threads(daemon->pid());
  EXPECT_GT(threads_before, 0);
  EXPECT_LE(threads_after, threads_before + 8)
      << kChannels * kStreamsPerChannel << " idle streams";

  const absl::Time signalled = absl::Now();
  ASSERT_TRUE(daemon->Kill(SIGTERM).ok());
  absl::StatusOr<int> status = daemon->Wait(absl::Seconds(10));
  const absl::Duration took = absl::Now() - signalled;
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_GE(took, absl::Milliseconds(1900));  // the results were at work
  EXPECT_LT(took, absl::Milliseconds(4500)) << "--drain_timeout=2s";
  reader.join();
  EXPECT_TRUE(draining);
  for (auto& open : streams) open->context.TryCancel();
}

}  // namespace
}  // namespace tessera
