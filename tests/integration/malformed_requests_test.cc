// Malformed requests sent with the raw generated stub to a real tesserad:
// each gets its expected status, and the daemon keeps answering.

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tessera.grpc.pb.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/raw_graph.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
namespace v1 = ::tessera::v1;

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
constexpr int32_t kF32 = 0;
constexpr int32_t kOpNone = 0;
constexpr int32_t kOpAdd = 4;
constexpr int32_t kOpMulMat = 19;
constexpr int32_t kOpView = 22;
constexpr int32_t kOpFlashAttnExt = 30;
constexpr uint64_t kBufferBytes = 1024;

// A session with one buffer of kBufferBytes on cpu0.
struct TestSession {
  std::string id;
  uint64_t buffer = 0;
};

// What the table's requests run against; shared by every case.
struct Env {
  std::unique_ptr<testing::DaemonProcess> daemon;
  std::unique_ptr<v1::Tessera::Stub> stub;
  TestSession mine;
  TestSession other;
  uint64_t big_buffer = 0;  // 8 MiB in `mine`
  std::vector<uint64_t> memory_free_before;
};

Env* env = nullptr;

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ctx;
}

grpc::Status Hello(uint32_t min, uint32_t max, v1::HelloResponse* response) {
  v1::HelloRequest request;
  request.set_min_version(min);
  request.set_max_version(max);
  request.set_client_name("malformed_requests_test");
  return env->stub->Hello(Ctx().get(), request, response);
}

uint64_t Alloc(const std::string& session, uint64_t size) {
  v1::AllocBufferRequest request;
  request.set_session(session);
  request.set_device("cpu0");
  request.set_size(size);
  v1::AllocBufferResponse response;
  grpc::Status status = env->stub->AllocBuffer(Ctx().get(), request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.buffer();
}

TestSession NewSession() {
  v1::HelloResponse hello;
  grpc::Status status = Hello(1, 1, &hello);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return {hello.session(), Alloc(hello.session(), kBufferBytes)};
}

std::vector<uint64_t> MemoryFree(const std::string& session) {
  v1::ListDevicesRequest request;
  request.set_session(session);
  v1::ListDevicesResponse response;
  EXPECT_TRUE(env->stub->ListDevices(Ctx().get(), request, &response).ok());
  std::vector<uint64_t> free;
  for (const v1::DeviceInfo& d : response.devices()) {
    free.push_back(d.memory_free());
  }
  return free;
}

// Tensor builders for graphs on the wire.
v1::TensorDef* Leaf(v1::GraphDef& g, uint32_t id, std::vector<int64_t> ne,
                    std::string name = "") {
  v1::TensorDef* t = g.add_tensors();
  t->set_id(id);
  t->set_type(kF32);
  for (int64_t n : ne) t->add_ne(n);
  t->set_op(kOpNone);
  t->set_name(name.empty() ? "t" + std::to_string(id) : name);
  return t;
}

v1::TensorDef* Node(v1::GraphDef& g, uint32_t id, int32_t op,
                    std::vector<int64_t> src, std::vector<int64_t> ne) {
  v1::TensorDef* t = Leaf(g, id, ne);
  t->set_op(op);
  for (int64_t s : src) t->add_src(s);
  return t;
}

// a [4, 2] + b [4, 2] -> c, the base that graph cases break.
v1::GraphDef AddGraph() {
  v1::GraphDef g;
  Leaf(g, 0, {4, 2}, "a");
  Leaf(g, 1, {4, 2}, "b");
  Node(g, 2, kOpAdd, {0, 1}, {4, 2})->set_name("c");
  return g;
}

v1::ComputeRequest AddCompute() {
  v1::ComputeRequest request;
  request.set_session(env->mine.id);
  *request.mutable_graph() = AddGraph();
  for (uint32_t id : {0u, 1u}) {
    v1::TensorData* in = request.add_inputs();
    in->set_id(id);
    in->set_data(std::string(32, '\0'));
  }
  request.add_outputs(2);
  return request;
}

grpc::Status Compute(const v1::ComputeRequest& request) {
  v1::ComputeResponse response;
  return env->stub->Compute(Ctx().get(), request, &response);
}

// Compute of `graph` with every input inline and zeroed, asking for
// tensor `output`.
grpc::Status ComputeGraph(const v1::GraphDef& graph, uint32_t output) {
  return Compute(testing::WithZeroInputs(env->mine.id, graph, output));
}

// Compute of the Add graph after `mutate`.
std::function<grpc::Status()> ComputeWith(
    std::function<void(v1::ComputeRequest&)> mutate) {
  return [mutate] {
    v1::ComputeRequest request = AddCompute();
    mutate(request);
    return Compute(request);
  };
}

v1::WriteTensorRequest Header(const std::string& session, uint64_t buffer,
                              uint64_t offset, uint64_t size) {
  v1::WriteTensorRequest r;
  r.mutable_header()->set_session(session);
  r.mutable_header()->mutable_dst()->set_buffer(buffer);
  r.mutable_header()->mutable_dst()->set_offset(offset);
  r.mutable_header()->set_size(size);
  return r;
}

v1::WriteTensorRequest Chunk(size_t n) {
  v1::WriteTensorRequest r;
  r.set_chunk(std::string(n, 'x'));
  return r;
}

// Sends `messages` on one WriteTensor stream and closes it.
grpc::Status Write(std::vector<v1::WriteTensorRequest> messages) {
  auto ctx = Ctx();
  v1::WriteTensorResponse response;
  auto writer = env->stub->WriteTensor(ctx.get(), &response);
  for (const v1::WriteTensorRequest& m : messages) {
    if (!writer->Write(m)) break;  // the server already finished
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status Read(const std::string& session, uint64_t buffer,
                  uint64_t offset, uint64_t size) {
  v1::ReadTensorRequest request;
  request.set_session(session);
  request.mutable_src()->set_buffer(buffer);
  request.mutable_src()->set_offset(offset);
  request.set_size(size);
  auto ctx = Ctx();
  auto reader = env->stub->ReadTensor(ctx.get(), request);
  v1::ReadTensorResponse chunk;
  while (reader->Read(&chunk)) {
  }
  return reader->Finish();
}

// One execution on an Execute stream; the response's status as a
// grpc::Status (the stream itself must end OK).
grpc::Status ExecuteOnce(const v1::ExecuteRequest& request) {
  auto ctx = Ctx();
  auto stream = env->stub->Execute(ctx.get());
  v1::ExecuteResponse response;
  if (!stream->Write(request) || !stream->Read(&response)) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "no response");
  }
  stream->WritesDone();
  grpc::Status end = stream->Finish();
  if (!end.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "stream failed");
  EXPECT_EQ(response.tag(), request.tag());
  return grpc::Status(static_cast<grpc::StatusCode>(response.status_code()),
                      response.status_message());
}

// A message on an Execute stream whose fault ends the stream: its status.
grpc::Status ExecuteStreamEnd(const v1::ExecuteRequest& request) {
  auto ctx = Ctx();
  auto stream = env->stub->Execute(ctx.get());
  if (!stream->Write(request)) return stream->Finish();
  v1::ExecuteResponse response;
  while (stream->Read(&response)) {
  }
  return stream->Finish();
}

uint64_t RegisterAdd() {
  v1::RegisterGraphRequest request;
  request.set_session(env->mine.id);
  *request.mutable_graph() = AddGraph();
  request.set_n_copies(2);
  v1::RegisterGraphResponse response;
  grpc::Status s = env->stub->RegisterGraph(Ctx().get(), request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return response.graph();
}

struct Case {
  std::string name;
  std::function<grpc::Status()> run;
  grpc::StatusCode code;
  std::string message;  // a part of the error message
};

std::vector<Case> Cases() {
  using C = grpc::StatusCode;
  return {
      // Sessions and versions.
      {"HelloVersionTooNew",
       [] { v1::HelloResponse r; return Hello(3, 4, &r); },
       C::FAILED_PRECONDITION, "versions 3..4"},
      {"HelloNoVersion", [] { v1::HelloResponse r; return Hello(0, 0, &r); },
       C::FAILED_PRECONDITION, ""},
      {"HelloInvertedRange",
       [] { v1::HelloResponse r; return Hello(5, 1, &r); },
       C::FAILED_PRECONDITION, ""},
      {"SessionIdOfOneMiBIsNotEchoedWhole",
       [] {
         v1::ListDevicesRequest q;
         q.set_session(std::string(1 << 20, 's'));
         v1::ListDevicesResponse r;
         return env->stub->ListDevices(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, "...(1048576 bytes)"},
      {"ListDevicesBadSession",
       [] {
         v1::ListDevicesRequest q;
         q.set_session("0123456789abcdef0123456789abcdef");
         v1::ListDevicesResponse r;
         return env->stub->ListDevices(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, "no open session"},
      {"CloseUnknownSession",
       [] {
         v1::CloseSessionRequest q;
         q.set_session("nope");
         v1::CloseSessionResponse r;
         return env->stub->CloseSession(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, ""},
      {"AttachUnknownSession",
       [] {
         v1::AttachRequest q;
         q.set_session("nope");
         auto ctx = Ctx();
         auto reader = env->stub->Attach(ctx.get(), q);
         v1::AttachEvent e;
         while (reader->Read(&e)) {
         }
         return reader->Finish();
       },
       C::NOT_FOUND, ""},

      // Buffers.
      {"AllocUnknownDevice",
       [] {
         v1::AllocBufferRequest q;
         q.set_session(env->mine.id);
         q.set_device("tpu7");
         q.set_size(16);
         v1::AllocBufferResponse r;
         return env->stub->AllocBuffer(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, "tpu7"},
      {"AllocHugeSize",
       [] {
         v1::AllocBufferRequest q;
         q.set_session(env->mine.id);
         q.set_device("cpu0");
         q.set_size(uint64_t{1} << 62);
         v1::AllocBufferResponse r;
         return env->stub->AllocBuffer(Ctx().get(), q, &r);
       },
       C::RESOURCE_EXHAUSTED, ""},
      {"AllocMaxSize",
       [] {
         v1::AllocBufferRequest q;
         q.set_session(env->mine.id);
         q.set_device("cpu0");
         q.set_size(kMax64);
         v1::AllocBufferResponse r;
         return env->stub->AllocBuffer(Ctx().get(), q, &r);
       },
       C::RESOURCE_EXHAUSTED, ""},
      {"AllocUnknownBufferType",
       [] {
         v1::AllocBufferRequest q;
         q.set_session(env->mine.id);
         q.set_device("cpu0");
         q.set_size(16);
         q.set_buffer_type("pinned-unicorn");
         v1::AllocBufferResponse r;
         return env->stub->AllocBuffer(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, "pinned-unicorn"},
      {"AllocUnknownUsage",
       [] {
         v1::AllocBufferRequest q;
         q.set_session(env->mine.id);
         q.set_device("cpu0");
         q.set_size(16);
         q.set_usage(static_cast<v1::BufferUsage>(7));
         v1::AllocBufferResponse r;
         return env->stub->AllocBuffer(Ctx().get(), q, &r);
       },
       C::INVALID_ARGUMENT, "usage"},
      {"FreeHandleZero",
       [] {
         v1::FreeBufferRequest q;
         q.set_session(env->mine.id);
         q.set_buffer(0);
         v1::FreeBufferResponse r;
         return env->stub->FreeBuffer(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, ""},
      {"FreeOtherSessionsBuffer",
       [] {
         v1::FreeBufferRequest q;
         q.set_session(env->mine.id);
         q.set_buffer(env->other.buffer);
         v1::FreeBufferResponse r;
         return env->stub->FreeBuffer(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, "in this session"},
      {"ClearValueNotAByte",
       [] {
         v1::ClearBufferRequest q;
         q.set_session(env->mine.id);
         q.set_buffer(env->mine.buffer);
         q.set_value(256);
         v1::ClearBufferResponse r;
         return env->stub->ClearBuffer(Ctx().get(), q, &r);
       },
       C::INVALID_ARGUMENT, "256"},
      {"AllocSizeUnknownType",
       [] {
         v1::GetAllocSizeRequest q;
         q.set_session(env->mine.id);
         q.set_device("cpu0");
         q.set_type(99);
         q.add_ne(4);
         v1::GetAllocSizeResponse r;
         return env->stub->GetAllocSize(Ctx().get(), q, &r);
       },
       C::INVALID_ARGUMENT, "99"},
      {"AllocSizeFiveDims",
       [] {
         v1::GetAllocSizeRequest q;
         q.set_session(env->mine.id);
         q.set_device("cpu0");
         for (int i = 0; i < 5; ++i) q.add_ne(2);
         v1::GetAllocSizeResponse r;
         return env->stub->GetAllocSize(Ctx().get(), q, &r);
       },
       C::INVALID_ARGUMENT, "5 dimensions"},
      {"AllocSizeOverflowingShape",
       [] {
         v1::GetAllocSizeRequest q;
         q.set_session(env->mine.id);
         q.set_device("cpu0");
         for (int i = 0; i < 4; ++i) q.add_ne(int64_t{1} << 40);
         v1::GetAllocSizeResponse r;
         return env->stub->GetAllocSize(Ctx().get(), q, &r);
       },
       C::INVALID_ARGUMENT, "overflows"},

      // Tensor transfers.
      {"WriteChunkBeforeHeader",
       [] { return Write({Chunk(8), Header(env->mine.id, env->mine.buffer, 0, 8)}); },
       C::INVALID_ARGUMENT, "chunk before the header"},
      {"WriteTruncatedStream",
       [] { return Write({Header(env->mine.id, env->mine.buffer, 0, 100), Chunk(50)}); },
       C::INVALID_ARGUMENT, "after 50 of the header's 100 bytes"},
      {"WriteMoreThanAnnounced",
       [] { return Write({Header(env->mine.id, env->mine.buffer, 0, 10), Chunk(20)}); },
       C::INVALID_ARGUMENT, "more than the header's 10 bytes"},
      {"WriteEmptyStream", [] { return Write({}); }, C::INVALID_ARGUMENT,
       "no header"},
      {"WriteTwoHeaders",
       [] {
         return Write({Header(env->mine.id, env->mine.buffer, 0, 8),
                       Header(env->mine.id, env->mine.buffer, 0, 8)});
       },
       C::INVALID_ARGUMENT, "second header"},
      {"WriteOutOfBounds",
       [] { return Write({Header(env->mine.id, env->mine.buffer, 1000, 100)}); },
       C::INVALID_ARGUMENT, "outside buffer"},
      {"WriteOverflowingOffset",
       [] {
         return Write({Header(env->mine.id, env->mine.buffer, kMax64 - 7, 16),
                       Chunk(16)});
       },
       C::INVALID_ARGUMENT, "outside buffer"},
      {"WriteOtherSessionsBuffer",
       [] { return Write({Header(env->mine.id, env->other.buffer, 0, 8), Chunk(8)}); },
       C::NOT_FOUND, ""},
      {"WriteBadSession",
       [] { return Write({Header("bogus", env->mine.buffer, 0, 8), Chunk(8)}); },
       C::NOT_FOUND, "no open session"},
      {"WriteChunkOverLimit",
       [] {
         return Write({Header(env->mine.id, env->big_buffer, 0, 6 << 20),
                       Chunk((4 << 20) + 1)});
       },
       C::INVALID_ARGUMENT, "exceeds max_chunk_bytes"},
      {"ReadOutOfBounds",
       [] { return Read(env->mine.id, env->mine.buffer, 512, 513); },
       C::INVALID_ARGUMENT, "outside buffer"},
      {"ReadOverflowingOffset",
       [] { return Read(env->mine.id, env->mine.buffer, kMax64, 2); },
       C::INVALID_ARGUMENT, "outside buffer"},
      {"ReadOtherSessionsBuffer",
       [] { return Read(env->mine.id, env->other.buffer, 0, 8); },
       C::NOT_FOUND, ""},
      {"ReadBadSession", [] { return Read("", env->mine.buffer, 0, 8); },
       C::NOT_FOUND, ""},
      {"MemsetOverflowingRange",
       [] {
         v1::MemsetTensorRequest q;
         q.set_session(env->mine.id);
         q.mutable_dst()->set_buffer(env->mine.buffer);
         q.mutable_dst()->set_offset(8);
         q.set_size(kMax64 - 4);
         v1::MemsetTensorResponse r;
         return env->stub->MemsetTensor(Ctx().get(), q, &r);
       },
       C::INVALID_ARGUMENT, "outside buffer"},
      {"CopyFromOtherSession",
       [] {
         v1::CopyTensorRequest q;
         q.set_session(env->mine.id);
         q.mutable_src()->set_buffer(env->other.buffer);
         q.mutable_dst()->set_buffer(env->mine.buffer);
         q.set_size(8);
         v1::CopyTensorResponse r;
         return env->stub->CopyTensor(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, "src"},
      {"CopyOutOfBounds",
       [] {
         v1::CopyTensorRequest q;
         q.set_session(env->mine.id);
         q.mutable_src()->set_buffer(env->mine.buffer);
         q.mutable_dst()->set_buffer(env->mine.buffer);
         q.mutable_dst()->set_offset(1020);
         q.set_size(8);
         v1::CopyTensorResponse r;
         return env->stub->CopyTensor(Ctx().get(), q, &r);
       },
       C::INVALID_ARGUMENT, "dst"},

      // Graphs.
      {"ComputeBadSession",
       ComputeWith([](v1::ComputeRequest& q) { q.set_session("x"); }),
       C::NOT_FOUND, ""},
      {"ComputeUnknownOp",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_graph()->mutable_tensors(2)->set_op(999);
       }),
       C::INVALID_ARGUMENT, "tensor 2 (\"c\"): unknown op 999"},
      {"ComputeUnknownType",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_graph()->mutable_tensors(1)->set_type(77);
       }),
       C::INVALID_ARGUMENT, "tensor 1 (\"b\"): unknown type 77"},
      {"ComputeForwardReference",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_graph()->mutable_tensors(2)->set_src(1, 3);
       }),
       C::INVALID_ARGUMENT, "src[1] 3 is not a tensor defined before"},
      {"ComputeCycle",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_graph()->mutable_tensors(2)->set_src(0, 2);
       }),
       C::INVALID_ARGUMENT, "tensor 2 (\"c\"): src[0] 2"},
      {"ComputeWrongShape",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_graph()->mutable_tensors(2)->set_ne(1, 5);
       }),
       C::INVALID_ARGUMENT, "tensor 2 (\"c\")"},
      {"ComputeNonBroadcastable",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_graph()->mutable_tensors(1)->set_ne(0, 3);
         q.mutable_inputs(1)->set_data(std::string(24, '\0'));
       }),
       C::INVALID_ARGUMENT, "tensor 2 (\"c\")"},
      {"ComputeFiveDims",
       ComputeWith([](v1::ComputeRequest& q) {
         for (int i = 0; i < 3; ++i) q.mutable_graph()->mutable_tensors(0)->add_ne(1);
       }),
       C::INVALID_ARGUMENT, "5 dimensions"},
      {"ComputeHugeDims",
       ComputeWith([](v1::ComputeRequest& q) {
         v1::TensorDef* t = q.mutable_graph()->mutable_tensors(0);
         t->clear_ne();
         for (int i = 0; i < 4; ++i) t->add_ne(int64_t{1} << 40);
       }),
       C::INVALID_ARGUMENT, "overflows"},
      {"ComputeTooManyOpParams",
       ComputeWith([](v1::ComputeRequest& q) {
         for (int i = 0; i < 17; ++i) {
           q.mutable_graph()->mutable_tensors(2)->add_op_params(0);
         }
       }),
       C::INVALID_ARGUMENT, "17 op_params"},
      {"ComputeThreeStrides",
       ComputeWith([](v1::ComputeRequest& q) {
         v1::TensorDef* t = q.mutable_graph()->mutable_tensors(0);
         for (int i = 0; i < 3; ++i) t->add_nb(4);
       }),
       C::INVALID_ARGUMENT, "3 strides"},
      {"ComputeDuplicateId",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_graph()->mutable_tensors(1)->set_id(0);
       }),
       C::INVALID_ARGUMENT, "duplicate id"},
      {"ComputeWeightOutsideBuffer",
       ComputeWith([](v1::ComputeRequest& q) {
         v1::TensorRef* data = q.mutable_graph()->mutable_tensors(1)->mutable_data();
         data->set_buffer(env->mine.buffer);
         data->set_offset(kBufferBytes - 16);
         q.mutable_inputs()->RemoveLast();
       }),
       C::INVALID_ARGUMENT, "tensor 1 (\"b\"): data of 32 bytes"},
      {"ComputeWeightOffsetOverflows",
       ComputeWith([](v1::ComputeRequest& q) {
         v1::TensorRef* data = q.mutable_graph()->mutable_tensors(1)->mutable_data();
         data->set_buffer(env->mine.buffer);
         data->set_offset(kMax64 - 8);
         q.mutable_inputs()->RemoveLast();
       }),
       C::INVALID_ARGUMENT, "is outside buffer"},
      {"ComputeWeightInOtherSession",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_graph()->mutable_tensors(1)->mutable_data()->set_buffer(
             env->other.buffer);
         q.mutable_inputs()->RemoveLast();
       }),
       C::NOT_FOUND, "tensor 1 (\"b\")"},
      {"ComputeViewOutsideSource",
       ComputeWith([](v1::ComputeRequest& q) {
         // d: a 4-float view at byte 24 of a's 32 bytes.
         v1::TensorDef* d = Node(*q.mutable_graph(), 3, kOpView, {0}, {4});
         d->set_view_src(0);
         d->set_view_offs(24);
         d->add_op_params(24);
       }),
       C::INVALID_ARGUMENT, "tensor 3"},
      {"ComputeMissingInput",
       ComputeWith([](v1::ComputeRequest& q) { q.mutable_inputs()->RemoveLast(); }),
       C::INVALID_ARGUMENT, "has no data"},
      {"ComputeInputWrongSize",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_inputs(0)->set_data(std::string(31, '\0'));
       }),
       C::INVALID_ARGUMENT, "needs 32 bytes, got 31"},
      {"ComputeInputNotALeaf",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_inputs(0)->set_id(2);
       }),
       C::INVALID_ARGUMENT, "not an input"},
      {"ComputeUnknownOutput",
       ComputeWith([](v1::ComputeRequest& q) { q.add_outputs(42); }),
       C::INVALID_ARGUMENT, "outputs[1]"},
      {"ComputeTooManyTensors",
       ComputeWith([](v1::ComputeRequest& q) {
         for (uint32_t id = 3; id < 9000; ++id) Leaf(*q.mutable_graph(), id, {1});
       }),
       C::RESOURCE_EXHAUSTED, "max_graph_nodes"},
      {"ComputeMessageTooLarge",
       ComputeWith([](v1::ComputeRequest& q) {
         q.mutable_inputs(0)->set_data(std::string(65 << 20, '\0'));
       }),
       C::RESOURCE_EXHAUSTED, ""},
      {"RegisterTooManyCopies",
       [] {
         v1::RegisterGraphRequest q;
         q.set_session(env->mine.id);
         *q.mutable_graph() = AddGraph();
         q.set_n_copies(9);
         v1::RegisterGraphResponse r;
         return env->stub->RegisterGraph(Ctx().get(), q, &r);
       },
       C::INVALID_ARGUMENT, "n_copies 9"},
      {"ComputeInlineInputOverMaxChunk",
       [] {
         v1::GraphDef g;
         Leaf(g, 0, {(8 << 20) / 4}, "a");
         Node(g, 1, kOpAdd, {0, 0}, {(8 << 20) / 4});
         return ComputeGraph(g, 1);
       },
       C::INVALID_ARGUMENT, "exceed 4194304 (max_chunk_bytes)"},
      {"ComputeZeroSizeBroadcastDims",
       [] {
         v1::GraphDef g;
         Leaf(g, 0, {4, 3, 0, 1}, "a");
         Leaf(g, 1, {4, 5, 0, 1}, "b");
         Node(g, 2, kOpMulMat, {0, 1}, {3, 5, 0, 1});
         return ComputeGraph(g, 2);
       },
       C::INVALID_ARGUMENT, "[DecodeGraph] tensor 2"},
      {"ComputeZeroHeads",
       [] {
         v1::GraphDef g;
         Leaf(g, 0, {4, 1, 0, 1}, "q");
         Leaf(g, 1, {4, 2, 0, 1}, "k");
         Leaf(g, 2, {4, 2, 0, 1}, "v");
         Node(g, 3, kOpFlashAttnExt, {0, 1, 2}, {4, 0, 1, 1});
         return ComputeGraph(g, 3);
       },
       C::INVALID_ARGUMENT, "[DecodeGraph] tensor 3"},
      {"RegisterUnknownDevice",
       [] {
         v1::RegisterGraphRequest q;
         q.set_session(env->mine.id);
         *q.mutable_graph() = AddGraph();
         q.add_devices("gpu9");
         v1::RegisterGraphResponse r;
         return env->stub->RegisterGraph(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, "gpu9"},
      {"ExecuteUnknownGraph",
       [] {
         v1::ExecuteRequest q;
         q.set_session(env->mine.id);
         q.set_graph(123456789);
         q.set_tag(7);
         return ExecuteOnce(q);
       },
       C::NOT_FOUND, "graph"},
      {"ExecuteOtherSessionsGraph",
       [] {
         v1::ExecuteRequest q;
         q.set_session(env->other.id);
         q.set_graph(RegisterAdd());
         q.set_tag(8);
         return ExecuteOnce(q);
       },
       C::NOT_FOUND, "graph"},
      {"ExecuteInputWrongSize",
       [] {
         v1::ExecuteRequest q;
         q.set_session(env->mine.id);
         q.set_graph(RegisterAdd());
         v1::TensorData* in = q.add_inputs();
         in->set_id(0);
         in->set_data("abc");
         q.add_outputs(2);
         return ExecuteOnce(q);
       },
       C::INVALID_ARGUMENT, "needs 32 bytes, got 3"},
      {"ExecuteTooManyInOneMessage",
       [] {
         v1::ExecuteRequest q;
         q.set_session(env->mine.id);
         for (int i = 0; i < 64; ++i) q.add_more()->set_session(env->mine.id);
         return ExecuteStreamEnd(q);
       },
       C::INVALID_ARGUMENT, "carries 65 executions; at most 64"},
      {"ExecuteNestedExecutions",
       [] {
         v1::ExecuteRequest q;
         q.set_session(env->mine.id);
         q.add_more()->add_more()->set_session(env->mine.id);
         return ExecuteStreamEnd(q);
       },
       C::INVALID_ARGUMENT, "execution 2 of a message carries executions"},
      {"ReleaseUnknownGraph",
       [] {
         v1::ReleaseGraphRequest q;
         q.set_session(env->mine.id);
         q.set_graph(env->mine.buffer);  // a buffer handle is not a graph
         v1::ReleaseGraphResponse r;
         return env->stub->ReleaseGraph(Ctx().get(), q, &r);
       },
       C::NOT_FOUND, ""},
  };
}

// Starts the daemon and the sessions once for the whole binary.
class DaemonEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    env = new Env;
    auto daemon =
        testing::DaemonProcess::Start({"--devices=cpu:2", "--threads=1"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    env->daemon = *std::move(daemon);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    env->stub = v1::Tessera::NewStub(grpc::CreateCustomChannel(
        env->daemon->address(), grpc::InsecureChannelCredentials(), args));
    v1::HelloResponse hello;
    ASSERT_TRUE(Hello(1, 1, &hello).ok());
    env->memory_free_before = MemoryFree(hello.session());
    env->mine = NewSession();
    env->other = NewSession();
    env->big_buffer = Alloc(env->mine.id, 8 << 20);
  }

  void TearDown() override {
    delete env;
    env = nullptr;
  }
};

::testing::Environment* const kDaemonEnvironment =
    ::testing::AddGlobalTestEnvironment(new DaemonEnvironment);

class MalformedRequestsTest : public ::testing::TestWithParam<Case> {};

TEST_P(MalformedRequestsTest, GetsTheExpectedStatusAndTheDaemonAnswers) {
  ASSERT_NE(env->daemon, nullptr);
  ASSERT_TRUE(env->daemon->IsRunning());
  const Case& c = GetParam();
  grpc::Status status = c.run();
  EXPECT_EQ(status.error_code(), c.code) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr(c.message));

  v1::HelloResponse hello;
  ASSERT_TRUE(Hello(1, 1, &hello).ok());
  EXPECT_EQ(hello.version(), 1u);
  EXPECT_FALSE(hello.session().empty());
  v1::ListDevicesRequest list;
  list.set_session(hello.session());
  v1::ListDevicesResponse devices;
  ASSERT_TRUE(env->stub->ListDevices(Ctx().get(), list, &devices).ok());
  ASSERT_EQ(devices.devices_size(), 2);
  EXPECT_EQ(devices.devices(0).name(), "cpu0");
  EXPECT_EQ(devices.devices(1).name(), "cpu1");
  v1::CloseSessionRequest close;
  close.set_session(hello.session());
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(env->stub->CloseSession(Ctx().get(), close, &closed).ok());
  EXPECT_TRUE(env->daemon->IsRunning());
}

INSTANTIATE_TEST_SUITE_P(Table, MalformedRequestsTest,
                         ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// After the table (a parameterized suite too, so that gtest runs it after
// the table): a valid compute still gives the right answer, and once the
// sessions close every device's memory is back where it started.
class MalformedRequestsAfterTest : public ::testing::TestWithParam<int> {};

TEST_P(MalformedRequestsAfterTest, DaemonStillComputesAndFreesEverything) {
  ASSERT_NE(env, nullptr);
  ASSERT_NE(env->daemon, nullptr);
  v1::ComputeRequest request = AddCompute();
  std::string a(32, '\0'), b(32, '\0');
  for (int i = 0; i < 8; ++i) {
    const float x = static_cast<float>(i), y = 0.5f * static_cast<float>(i);
    std::memcpy(&a[4 * i], &x, 4);
    std::memcpy(&b[4 * i], &y, 4);
  }
  request.mutable_inputs(0)->set_data(a);
  request.mutable_inputs(1)->set_data(b);
  v1::ComputeResponse response;
  grpc::Status status = env->stub->Compute(Ctx().get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  ASSERT_EQ(response.outputs(0).data().size(), 32u);
  for (int i = 0; i < 8; ++i) {
    float c;
    std::memcpy(&c, &response.outputs(0).data()[4 * i], 4);
    EXPECT_FLOAT_EQ(c, 1.5f * static_cast<float>(i));
  }

  for (const std::string& id : {env->mine.id, env->other.id}) {
    v1::CloseSessionRequest close;
    close.set_session(id);
    v1::CloseSessionResponse closed;
    ASSERT_TRUE(env->stub->CloseSession(Ctx().get(), close, &closed).ok());
  }
  v1::HelloResponse hello;
  ASSERT_TRUE(Hello(1, 1, &hello).ok());
  EXPECT_EQ(MemoryFree(hello.session()), env->memory_free_before);
  EXPECT_TRUE(env->daemon->IsRunning());
}

INSTANTIATE_TEST_SUITE_P(Once, MalformedRequestsAfterTest, ::testing::Values(0));

}  // namespace
}  // namespace tessera
