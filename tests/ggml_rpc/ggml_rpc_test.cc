// tesserad's ggml-rpc listener against a client written from the protocol's
// definition (ggml_rpc_client.h), with the daemon as a real process.

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "graph/type.h"
#include "gtest/gtest.h"
#include "tests/ggml_rpc/ggml_rpc_client.h"
#include "tests/ggml_rpc/llama_graph.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/metrics_scrape.h"

namespace tessera::testing {
namespace {

constexpr uint64_t kBufferBytes = 1 << 16;

// A daemon with one CPU device, its ggml-rpc listener on a port the kernel
// picks, and `flag`.
absl::StatusOr<std::unique_ptr<DaemonProcess>> StartWithListener(
    const std::string& flag) {
  return DaemonProcess::Start(
      {"--devices=cpu", "--ggml_rpc_listen=127.0.0.1:0", flag});
}

class GgmlRpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cache_dir_ = new std::string(absl::StrCat(
        std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
        "/ggml_rpc_cache"));
    auto daemon = StartWithListener(absl::StrCat("--cache_dir=", *cache_dir_));
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = daemon->release();
    ASSERT_NE(daemon_->ggml_rpc_port(), 0);
  }
  static void TearDownTestSuite() {
    delete daemon_;
    delete cache_dir_;
  }

  static std::unique_ptr<GgmlRpcClient> Connect() {
    auto c = GgmlRpcClient::Connect(daemon_->ggml_rpc_port());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  static uint64_t FreeMemory(GgmlRpcClient& c) {
    std::vector<uint8_t> req;
    Put(req, 0, 4);
    auto r = c.Call(kGetDeviceMemory, req, 16);
    EXPECT_TRUE(r.ok()) << r.status();
    uint64_t free = 0;
    if (r.ok()) std::memcpy(&free, r->data(), 8);
    return free;
  }

  // Free memory once the connections of earlier tests, which the daemon
  // frees after they close, are gone: the same reading three times, 20 ms
  // apart (at most 2 s).
  static uint64_t SettledFreeMemory(GgmlRpcClient& c) {
    uint64_t free = FreeMemory(c);
    for (int same = 0, i = 0; same < 2 && i < 100; ++i) {
      absl::SleepFor(absl::Milliseconds(20));
      const uint64_t now = FreeMemory(c);
      same = now == free ? same + 1 : 0;
      free = now;
    }
    return free;
  }

  static DaemonProcess* daemon_;
  static std::string* cache_dir_;
};
DaemonProcess* GgmlRpcTest::daemon_ = nullptr;
std::string* GgmlRpcTest::cache_dir_ = nullptr;

std::vector<uint8_t> U64(uint64_t v) {
  std::vector<uint8_t> out;
  Put(out, v, 8);
  return out;
}

uint64_t AsU64(const std::vector<uint8_t>& b, size_t at = 0) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}

GgmlTensor Bytes(const GgmlRpcClient::Allocation& a, uint64_t offset,
                 uint32_t n) {
  return Contiguous(1, 0, 4, {n / 4}, a.remote_ptr, a.base + offset);
}

TEST_F(GgmlRpcTest, HelloAnswersVersion510) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->major(), 5);
  EXPECT_EQ(c->minor(), 1);
  EXPECT_EQ(c->patch(), 0);
}

TEST_F(GgmlRpcTest, EveryCommand) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(*c->DeviceCount(), 1u);
  std::vector<uint8_t> dev0;
  Put(dev0, 0, 4);
  const uint64_t alignment = AsU64(*c->Call(kGetAlignment, dev0, 8));
  EXPECT_GT(alignment, 0u);
  EXPECT_EQ(alignment & (alignment - 1), 0u);
  EXPECT_GE(AsU64(*c->Call(kGetMaxSize, dev0, 8)), kBufferBytes);
  auto mem = *c->Call(kGetDeviceMemory, dev0, 16);
  EXPECT_LE(AsU64(mem, 0), AsU64(mem, 8));

  auto a = c->Alloc(0, kBufferBytes);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NE(a->remote_ptr, 0u);
  EXPECT_EQ(a->size, kBufferBytes);
  EXPECT_EQ(a->base % alignment, 0u);
  // New buffers are cleared.
  EXPECT_EQ(*c->GetTensor(Bytes(*a, 0, 64), 0, 64),
            std::vector<uint8_t>(64, 0));

  std::vector<uint8_t> data(256);
  for (size_t i = 0; i < data.size(); ++i) data[i] = i;
  const GgmlTensor t = Bytes(*a, 1024, 256);
  ASSERT_TRUE(c->SetTensor(t, 0, data.data(), data.size()).ok());
  EXPECT_EQ(*c->GetTensor(t, 0, 256), data);
  EXPECT_EQ(*c->GetTensor(t, 16, 8),
            std::vector<uint8_t>(data.begin() + 16, data.begin() + 24));

  // MEMSET_TENSOR: bytes [8, 12) of the tensor to 0xab.
  std::vector<uint8_t> req = Encode(t);
  Put(req, 8, 8);
  Put(req, 4, 8);
  Put(req, 0xab, 1);
  ASSERT_TRUE(c->Call(kMemsetTensor, req, 0).ok());
  std::vector<uint8_t> want = data;
  std::fill(want.begin() + 8, want.begin() + 12, 0xab);
  EXPECT_EQ(*c->GetTensor(t, 0, 256), want);

  // COPY_TENSOR into a second buffer.
  auto b = c->Alloc(0, kBufferBytes);
  ASSERT_TRUE(b.ok());
  const GgmlTensor dst = Bytes(*b, 512, 256);
  req = Encode(t);
  Put(req, Encode(dst));
  EXPECT_EQ(*c->Call(kCopyTensor, req, 1), std::vector<uint8_t>{1});
  EXPECT_EQ(*c->GetTensor(dst, 0, 256), want);

  // INIT_TENSOR and GET_ALLOC_SIZE.
  ASSERT_TRUE(c->Call(kInitTensor, Encode(t), 0).ok());
  req.clear();
  Put(req, 0, 4);
  Put(req, Encode(t));
  for (int i = 0; i < 10; ++i) Put(req, std::vector<uint8_t>(296, 0));
  EXPECT_EQ(AsU64(*c->Call(kGetAllocSize, req, 8)), 256u);

  // BUFFER_CLEAR.
  req = U64(b->remote_ptr);
  Put(req, 7, 1);
  ASSERT_TRUE(c->Call(kBufferClear, req, 0).ok());
  EXPECT_EQ(*c->GetTensor(dst, 0, 4), std::vector<uint8_t>(4, 7));

  // ALLOC_BUFFER beyond the device answers a null pointer; the connection
  // goes on.
  auto huge = c->Alloc(0, uint64_t{1} << 60);
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(huge->remote_ptr, 0u);

  // FREE_BUFFER; the pointer is then unknown.
  ASSERT_TRUE(c->Call(kFreeBuffer, U64(b->remote_ptr), 0).ok());
  EXPECT_FALSE(c->Call(kBufferGetBase, U64(b->remote_ptr), 8).ok());
  EXPECT_TRUE(c->ClosedByServer());
}

// SET_TENSOR of more than 10 MiB keeps the bytes in the cache directory;
// SET_TENSOR_HASH then places them anywhere without sending them.
TEST_F(GgmlRpcTest, SetTensorHashUsesTheCache) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  const size_t n = (size_t{10} << 20) + 4096;
  auto a = c->Alloc(0, 2 * n + 4096);
  ASSERT_TRUE(a.ok() && a->remote_ptr != 0);
  std::vector<uint8_t> data(n);
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a, 64 bits
  for (size_t i = 0; i < n; ++i) {
    data[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
    hash = (hash ^ data[i]) * 0x100000001b3ULL;
  }
  GgmlTensor t = Contiguous(1, 0, 4, {uint32_t(n / 4)}, a->remote_ptr, a->base);
  std::vector<uint8_t> req = Encode(t);
  Put(req, 0, 8);
  Put(req, hash ^ 1, 8);
  EXPECT_EQ(*c->Call(kSetTensorHash, req, 1), std::vector<uint8_t>{0});
  ASSERT_TRUE(c->SetTensor(t, 0, data.data(), n).ok());
  GgmlTensor there = t;
  there.data = a->base + n + 4096;
  req = Encode(there);
  Put(req, 0, 8);
  Put(req, hash, 8);
  EXPECT_EQ(*c->Call(kSetTensorHash, req, 1), std::vector<uint8_t>{1});
  EXPECT_EQ(*c->GetTensor(there, 0, n), data);
}

// The same graph through ggml-rpc (GRAPH_COMPUTE, then GRAPH_RECOMPUTE with
// new tokens) and through the gRPC API gives the same logits.
TEST_F(GgmlRpcTest, LlamaGraphMatchesGrpc) {
  auto built = BuildLlama();
  ASSERT_TRUE(built.ok()) << built.status();
  const std::vector<int32_t> tokens1 = {1, 5, 9, 3}, tokens2 = {7, 2, 2, 15};

  auto grpc_logits = [&](const std::vector<int32_t>& tokens) {
    auto g = BuildLlama().value();
    auto leaf_data = LlamaLeafData(g, tokens);
    std::vector<client::TensorInput> inputs;
    for (const Tensor* t : g.graph->leafs()) {
      const auto& bytes = leaf_data.at(t->name);
      inputs.push_back({t, bytes.data(), bytes.size()});
    }
    std::vector<float> out(g.logits->NumElements());
    auto client = client::Client::Connect(daemon_->address()).value();
    absl::Status s = client->Compute(
        *g.graph, inputs, {{g.logits, out.data(), out.size() * 4}});
    EXPECT_TRUE(s.ok()) << s;
    return out;
  };

  auto c = Connect();
  ASSERT_NE(c, nullptr);
  auto sizes = ToGgml(*built->graph, 1, 0, 2, 0).value();
  auto weights = c->Alloc(0, sizes.weights_bytes);
  auto compute = c->Alloc(0, sizes.compute_bytes);
  ASSERT_TRUE(weights.ok() && compute.ok());
  auto gg = ToGgml(*built->graph, weights->remote_ptr, weights->base,
                   compute->remote_ptr, compute->base)
                .value();
  auto leaf_data = LlamaLeafData(*built, tokens1);
  for (const Tensor* t : built->graph->leafs()) {
    const auto& bytes = leaf_data.at(t->name);
    ASSERT_TRUE(c->SetTensor(gg.by_tensor.at(t), 0, bytes.data(),
                             bytes.size())
                    .ok());
  }
  const GgmlTensor& logits = gg.by_tensor.at(built->logits);
  const size_t logits_bytes = built->logits->NumBytes();
  ASSERT_TRUE(c->Send(kGraphCompute, GraphPayload(0, gg.nodes, gg.tensors))
                  .ok());
  auto got1 = c->GetTensor(logits, 0, logits_bytes);
  ASSERT_TRUE(got1.ok()) << got1.status();

  const GgmlTensor& tok = gg.by_tensor.at(built->tokens);
  ASSERT_TRUE(c->SetTensor(tok, 0, tokens2.data(), 16).ok());
  std::vector<uint8_t> dev0;
  Put(dev0, 0, 4);
  ASSERT_TRUE(c->Send(kGraphRecompute, dev0).ok());
  auto got2 = c->GetTensor(logits, 0, logits_bytes);
  ASSERT_TRUE(got2.ok()) << got2.status();

  for (auto [got, tokens] : {std::pair{&*got1, tokens1}, {&*got2, tokens2}}) {
    const std::vector<float> want = grpc_logits(tokens);
    std::vector<float> have(want.size());
    std::memcpy(have.data(), got->data(), logits_bytes);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite(want[i]));
      EXPECT_EQ(have[i], want[i]) << "logit " << i;
    }
  }
  EXPECT_NE(*got1, *got2);
}

// Two connections at once: each has its own buffers; a pointer of one is
// an error on the other, and closes only that one.
TEST_F(GgmlRpcTest, ConnectionsAreIsolated) {
  auto c1 = Connect();
  auto c2 = Connect();
  ASSERT_NE(c1, nullptr);
  ASSERT_NE(c2, nullptr);
  auto a1 = c1->Alloc(0, kBufferBytes);
  auto a2 = c2->Alloc(0, kBufferBytes);
  ASSERT_TRUE(a1.ok() && a2.ok());
  const std::vector<uint8_t> one(64, 1), two(64, 2);
  ASSERT_TRUE(c1->SetTensor(Bytes(*a1, 0, 64), 0, one.data(), 64).ok());
  ASSERT_TRUE(c2->SetTensor(Bytes(*a2, 0, 64), 0, two.data(), 64).ok());
  EXPECT_EQ(*c1->GetTensor(Bytes(*a1, 0, 64), 0, 64), one);
  EXPECT_EQ(*c2->GetTensor(Bytes(*a2, 0, 64), 0, 64), two);
  EXPECT_FALSE(c2->GetTensor(Bytes(*a1, 0, 64), 0, 64).ok());
  EXPECT_TRUE(c2->ClosedByServer());
  EXPECT_EQ(*c1->GetTensor(Bytes(*a1, 0, 64), 0, 64), one);
}

// A client that drops mid-SET_TENSOR leaves nothing behind.
TEST_F(GgmlRpcTest, DroppedSetTensorFreesItsMemory) {
  auto watcher = Connect();
  ASSERT_NE(watcher, nullptr);
  const uint64_t before = SettledFreeMemory(*watcher);
  const size_t n = 32 << 20;
  {
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    auto a = c->Alloc(0, n);
    ASSERT_TRUE(a.ok() && a->remote_ptr != 0);
    EXPECT_LE(FreeMemory(*watcher), before - n);
    const GgmlTensor t = Bytes(*a, 0, n);
    std::vector<uint8_t> head = {kSetTensor};
    Put(head, kGgmlTensorBytes + 8 + n, 8);
    Put(head, Encode(t));
    Put(head, 0, 8);
    const std::vector<uint8_t> half(n / 2, 5);
    ASSERT_TRUE(c->SendRaw(head.data(), head.size()).ok());
    ASSERT_TRUE(c->SendRaw(half.data(), half.size()).ok());
  }  // closes the socket
  uint64_t after = 0;
  for (int i = 0; i < 200 && (after = FreeMemory(*watcher)) < before; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(after, before);
}

// The bytes of one request: command, size (the payload's unless `size`
// says otherwise), payload.
std::vector<uint8_t> Frame(uint8_t command, const std::vector<uint8_t>& payload,
                           uint64_t size = UINT64_MAX) {
  std::vector<uint8_t> out = {command};
  Put(out, size == UINT64_MAX ? payload.size() : size, 8);
  Put(out, payload);
  return out;
}

// What a malformed request may refer to: the connection's own buffer, and
// a valid one-node graph (ADD of a 16-value leaf to itself) to break.
struct Scene {
  GgmlRpcClient::Allocation a;
  GgmlTensor leaf, node;
  std::vector<uint8_t> Graph(GgmlTensor n) const {
    return GraphPayload(0, {n.id}, {leaf, n});
  }
  std::vector<uint8_t> Graph() const { return Graph(node); }
  std::vector<uint8_t> Tensor(uint64_t offset, uint32_t n) const {
    return Encode(Bytes(a, offset, n));
  }
};

struct Malformed {
  const char* name;
  std::function<std::vector<uint8_t>(const Scene&)> bytes;
  bool hello = true;
  // Whether the connection has computed the scene's valid graph before.
  bool graph_first = true;
};

std::vector<uint8_t> Cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  Put(a, b);
  return a;
}
std::vector<uint8_t> U32(uint32_t v) {
  std::vector<uint8_t> out;
  Put(out, v, 4);
  return out;
}
GgmlTensor With(GgmlTensor t, const std::function<void(GgmlTensor&)>& f) {
  f(t);
  return t;
}

const std::vector<Malformed>& MalformedTable() {
  static const auto* table = new std::vector<Malformed>{
      // Framing and commands.
      {"first command not HELLO", [](const Scene&) { return Frame(kDeviceCount, {}); }, false},
      {"HELLO of 23 bytes", [](const Scene&) { return Frame(kHello, std::vector<uint8_t>(23)); }, false},
      {"HELLO again", [](const Scene&) { return Frame(kHello, std::vector<uint8_t>(24)); }},
      {"command 18", [](const Scene&) { return Frame(18, {}); }},
      {"command 255", [](const Scene&) { return Frame(255, {}); }},
      {"DEVICE_COUNT with a payload", [](const Scene&) { return Frame(kDeviceCount, U32(0)); }},
      {"ALLOC_BUFFER short", [](const Scene&) { return Frame(kAllocBuffer, std::vector<uint8_t>(11)); }},
      {"ALLOC_BUFFER device 99", [](const Scene&) { return Frame(kAllocBuffer, Cat(U32(99), U64(64))); }},
      {"GET_ALIGNMENT device 7", [](const Scene&) { return Frame(kGetAlignment, U32(7)); }},
      {"GET_MAX_SIZE empty", [](const Scene&) { return Frame(kGetMaxSize, {}); }},
      {"GET_DEVICE_MEMORY device 3", [](const Scene&) { return Frame(kGetDeviceMemory, U32(3)); }},
      {"BUFFER_GET_BASE unknown", [](const Scene&) { return Frame(kBufferGetBase, U64(12345)); }},
      {"FREE_BUFFER unknown", [](const Scene&) { return Frame(kFreeBuffer, U64(0)); }},
      {"BUFFER_CLEAR unknown", [](const Scene&) { return Frame(kBufferClear, Cat(U64(99999), {0})); }},
      // Tensor transfers.
      {"SET_TENSOR shorter than its header", [](const Scene&) { return Frame(kSetTensor, std::vector<uint8_t>(100)); }},
      {"SET_TENSOR before the buffer", [](const Scene& s) {
         GgmlTensor t = Bytes(s.a, 0, 16);
         t.data = s.a.base - 64;
         return Frame(kSetTensor, Cat(Cat(Encode(t), U64(0)), std::vector<uint8_t>(16)));
       }},
      {"SET_TENSOR past the end", [](const Scene& s) {
         return Frame(kSetTensor, Cat(Cat(s.Tensor(kBufferBytes - 8, 16), U64(0)), std::vector<uint8_t>(16)));
       }},
      {"SET_TENSOR offset overflowing", [](const Scene& s) {
         return Frame(kSetTensor, Cat(Cat(s.Tensor(0, 16), U64(~uint64_t{0} - 7)), std::vector<uint8_t>(16)));
       }},
      {"SET_TENSOR in buffer 0", [](const Scene& s) {
         GgmlTensor t = Bytes(s.a, 0, 16);
         t.buffer = 0;
         return Frame(kSetTensor, Cat(Cat(Encode(t), U64(0)), std::vector<uint8_t>(16)));
       }},
      {"SET_TENSOR_HASH of 300 bytes", [](const Scene& s) { return Frame(kSetTensorHash, std::vector<uint8_t>(300)); }},
      {"SET_TENSOR_HASH outside the buffer", [](const Scene& s) {
         return Frame(kSetTensorHash, Cat(Cat(s.Tensor(kBufferBytes + 64, 16), U64(0)), U64(1)));
       }},
      {"GET_TENSOR past the end", [](const Scene& s) {
         return Frame(kGetTensor, Cat(Cat(s.Tensor(0, 16), U64(8)), U64(kBufferBytes)));
       }},
      {"GET_TENSOR of 303 bytes", [](const Scene& s) { return Frame(kGetTensor, std::vector<uint8_t>(303)); }},
      {"GET_TENSOR of another buffer", [](const Scene& s) {
         GgmlTensor t = Bytes(s.a, 0, 16);
         t.buffer += 1000;
         return Frame(kGetTensor, Cat(Cat(Encode(t), U64(0)), U64(16)));
       }},
      {"MEMSET_TENSOR outside the tensor", [](const Scene& s) {
         return Frame(kMemsetTensor, Cat(Cat(Cat(s.Tensor(0, 16), U64(8)), U64(16)), {1}));
       }},
      {"MEMSET_TENSOR of type 99", [](const Scene& s) {
         GgmlTensor t = Bytes(s.a, 0, 16);
         t.type = 99;
         return Frame(kMemsetTensor, Cat(Cat(Cat(Encode(t), U64(0)), U64(4)), {1}));
       }},
      {"COPY_TENSOR into too small a space", [](const Scene& s) {
         return Frame(kCopyTensor, Cat(s.Tensor(0, 4096), s.Tensor(kBufferBytes - 64, 4096)));
       }},
      {"COPY_TENSOR with ne[0] not whole blocks", [](const Scene& s) {
         GgmlTensor t = Bytes(s.a, 0, 16);
         t.type = 8;  // Q8_0
         t.ne[0] = 33;
         return Frame(kCopyTensor, Cat(Encode(t), s.Tensor(1024, 64)));
       }},
      {"INIT_TENSOR outside the buffer", [](const Scene& s) { return Frame(kInitTensor, s.Tensor(kBufferBytes, 64)); }},
      {"GET_ALLOC_SIZE device 5", [](const Scene& s) {
         std::vector<uint8_t> req = Cat(U32(5), s.Tensor(0, 16));
         for (int i = 0; i < 10; ++i) Put(req, std::vector<uint8_t>(296));
         return Frame(kGetAllocSize, req);
       }},
      // Graphs.
      {"GRAPH_RECOMPUTE with no graph", [](const Scene&) { return Frame(kGraphRecompute, U32(0)); }, true, false},
      {"GRAPH_RECOMPUTE device 9", [](const Scene&) { return Frame(kGraphRecompute, U32(9)); }},
      {"GRAPH_COMPUTE of 0 bytes", [](const Scene&) { return Frame(kGraphCompute, {}); }},
      {"GRAPH_COMPUTE of 4 bytes", [](const Scene&) { return Frame(kGraphCompute, U32(0)); }},
      {"GRAPH_COMPUTE claiming 1 TiB", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(), uint64_t{1} << 40); }},
      {"GRAPH_COMPUTE n_nodes lies", [](const Scene& s) {
         std::vector<uint8_t> g = s.Graph();
         g[4] = 200;
         return Frame(kGraphCompute, g);
       }},
      {"GRAPH_COMPUTE n_tensors lies", [](const Scene& s) {
         std::vector<uint8_t> g = s.Graph();
         g[16] = 3;
         return Frame(kGraphCompute, g);
       }},
      {"GRAPH_COMPUTE trailing bytes", [](const Scene& s) { return Frame(kGraphCompute, Cat(s.Graph(), {0, 0, 0})); }},
      {"GRAPH_COMPUTE no tensors", [](const Scene& s) { return Frame(kGraphCompute, GraphPayload(0, {s.node.id}, {})); }},
      {"GRAPH_COMPUTE no nodes", [](const Scene& s) { return Frame(kGraphCompute, GraphPayload(0, {}, {s.leaf})); }},
      {"GRAPH_COMPUTE device 9", [](const Scene& s) { return Frame(kGraphCompute, GraphPayload(9, {s.node.id}, {s.leaf, s.node})); }},
      {"GRAPH_COMPUTE node id 0", [](const Scene& s) { return Frame(kGraphCompute, GraphPayload(0, {0}, {s.leaf, s.node})); }},
      {"GRAPH_COMPUTE node not in the payload", [](const Scene& s) { return Frame(kGraphCompute, GraphPayload(0, {77}, {s.leaf, s.node})); }},
      {"GRAPH_COMPUTE duplicate id", [](const Scene& s) {
         return Frame(kGraphCompute, GraphPayload(0, {s.node.id}, {s.leaf, s.node, s.leaf}));
       }},
      {"GRAPH_COMPUTE unknown op", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.op = 200; }))); }},
      {"GRAPH_COMPUTE unsupported op (ADD_ID)", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.op = 3; }))); }},
      {"GRAPH_COMPUTE unary op 99", [](const Scene& s) {
         return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.op = 91; t.op_params[0] = 99; t.src[1] = 0; })));
       }},
      {"GRAPH_COMPUTE RMS_NORM eps negative", [](const Scene& s) {
         return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) {
                        const float eps = -1.0f;
                        t.op = 25;
                        std::memcpy(&t.op_params[0], &eps, 4);
                        t.src[1] = 0;
                      })));
       }},
      {"GRAPH_COMPUTE ADD with a stray op_param", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.op_params[5] = 1; }))); }},
      {"GRAPH_COMPUTE source not in the payload", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.src[1] = 4242; }))); }},
      {"GRAPH_COMPUTE a cycle", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [&](GgmlTensor& t) { t.src[1] = t.id; }))); }},
      {"GRAPH_COMPUTE retired type 4", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.type = 4; }))); }},
      {"GRAPH_COMPUTE shape that does not fit", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.ne[0] = 8; t.nb[1] = t.nb[2] = t.nb[3] = 32; }))); }},
      {"GRAPH_COMPUTE nb[0] of 3", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.nb[0] = 3; }))); }},
      {"GRAPH_COMPUTE unknown flags", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.flags = 1 << 9; }))); }},
      {"GRAPH_COMPUTE node data outside the buffer", [](const Scene& s) {
         return Frame(kGraphCompute, s.Graph(With(s.node, [&](GgmlTensor& t) { t.data = s.a.base + kBufferBytes - 4; })));
       }},
      {"GRAPH_COMPUTE leaf without data", [](const Scene& s) {
         GgmlTensor leaf = s.leaf;
         leaf.buffer = leaf.data = 0;
         return Frame(kGraphCompute, GraphPayload(0, {s.node.id}, {leaf, s.node}));
       }},
      {"GRAPH_COMPUTE data without a buffer", [](const Scene& s) { return Frame(kGraphCompute, s.Graph(With(s.node, [](GgmlTensor& t) { t.buffer = 0; }))); }},
      {"GRAPH_COMPUTE view past its source", [](const Scene& s) {
         GgmlTensor view = Contiguous(3, 0, 4, {16}, s.a.remote_ptr, s.leaf.data + 32);
         view.op = 37;  // VIEW
         view.src[0] = view.view_src = s.leaf.id;
         view.view_offs = view.op_params[0] = 32;
         return Frame(kGraphCompute, GraphPayload(0, {3}, {s.leaf, view}));
       }},
      {"GRAPH_COMPUTE view at another address", [](const Scene& s) {
         GgmlTensor view = Contiguous(3, 0, 4, {8}, s.a.remote_ptr, s.leaf.data + 4096);
         view.op = 37;
         view.src[0] = view.view_src = s.leaf.id;
         view.view_offs = view.op_params[0] = 0;
         return Frame(kGraphCompute, GraphPayload(0, {3}, {s.leaf, view}));
       }},
  };
  return *table;
}

// Each malformed request gets the connection closed (the protocol's failure
// reply); another connection is served all along, and its data stays.
TEST_F(GgmlRpcTest, MalformedRequestsCloseOnlyTheirConnection) {
  ASSERT_GE(MalformedTable().size(), 40u);
  auto witness = Connect();
  ASSERT_NE(witness, nullptr);
  auto wa = witness->Alloc(0, 64);
  ASSERT_TRUE(wa.ok());
  const std::vector<uint8_t> mine(64, 42);
  ASSERT_TRUE(witness->SetTensor(Bytes(*wa, 0, 64), 0, mine.data(), 64).ok());
  for (const Malformed& m : MalformedTable()) {
    SCOPED_TRACE(m.name);
    auto c = m.hello ? GgmlRpcClient::Connect(daemon_->ggml_rpc_port())
                     : GgmlRpcClient::ConnectRaw(daemon_->ggml_rpc_port());
    ASSERT_TRUE(c.ok()) << c.status();
    Scene scene;
    if (m.hello) {
      auto a = (*c)->Alloc(0, kBufferBytes);
      ASSERT_TRUE(a.ok() && a->remote_ptr != 0);
      scene.a = *a;
      // A valid graph first, so that a bad one is refused on its own.
      scene.leaf = Contiguous(1, 0, 4, {16}, a->remote_ptr, a->base);
      scene.node = Contiguous(2, 0, 4, {16}, a->remote_ptr, a->base + 256);
      scene.node.op = 2;  // ADD
      scene.node.src[0] = scene.node.src[1] = 1;
      if (m.graph_first) {
        ASSERT_TRUE((*c)->Send(kGraphCompute, scene.Graph()).ok());
      }
      ASSERT_EQ(*(*c)->DeviceCount(), 1u);
    }
    const std::vector<uint8_t> bytes = m.bytes(scene);
    (void)(*c)->SendRaw(bytes.data(), bytes.size());
    EXPECT_TRUE((*c)->ClosedByServer());
    EXPECT_EQ(*witness->GetTensor(Bytes(*wa, 0, 64), 0, 64), mine);
  }
}

// ggml lists a parameter (a tensor without an op, GGML_TENSOR_FLAG_PARAM)
// among a graph's nodes; it computes nothing there. A graph of such a node
// and an ADD computes the ADD; a graph of the parameter alone computes
// nothing, and so does its RECOMPUTE; the connection goes on.
TEST_F(GgmlRpcTest, ParameterNodesComputeNothing) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  auto a = c->Alloc(0, kBufferBytes);
  ASSERT_TRUE(a.ok() && a->remote_ptr != 0);
  GgmlTensor param = Contiguous(1, 0, 4, {16}, a->remote_ptr, a->base);
  param.flags = 4;  // GGML_TENSOR_FLAG_PARAM
  GgmlTensor sum = Contiguous(2, 0, 4, {16}, a->remote_ptr, a->base + 256);
  sum.op = 2;  // ADD
  sum.src[0] = sum.src[1] = 1;
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = 0.5f * i - 3.0f;
  ASSERT_TRUE(c->SetTensor(param, 0, x.data(), 64).ok());

  ASSERT_TRUE(
      c->Send(kGraphCompute, GraphPayload(0, {1, 2}, {param, sum})).ok());
  std::vector<uint8_t> got = *c->GetTensor(sum, 0, 64);
  std::vector<float> y(16);
  std::memcpy(y.data(), got.data(), 64);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], 2 * x[i]) << i;

  ASSERT_TRUE(c->Send(kGraphCompute, GraphPayload(0, {1}, {param})).ok());
  // RECOMPUTE is of the parameter-only graph: the ADD does not run again.
  std::vector<float> other(16, 100.0f);
  ASSERT_TRUE(c->SetTensor(param, 0, other.data(), 64).ok());
  ASSERT_TRUE(c->Send(kGraphRecompute, U32(0)).ok());
  got = *c->GetTensor(sum, 0, 64);
  std::memcpy(y.data(), got.data(), 64);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], 2 * x[i]) << i;
  EXPECT_EQ(*c->DeviceCount(), 1u);
}

// Floats of `t` (F32) as the daemon holds them.
std::vector<float> Floats(GgmlRpcClient& c, const GgmlTensor& t, uint32_t n) {
  const std::vector<uint8_t> bytes = *c.GetTensor(t, 0, 4 * n);
  std::vector<float> out(n);
  std::memcpy(out.data(), bytes.data(), 4 * n);
  return out;
}

// Graph forms ggml builds that are not tessera's own, computed as ggml does:
// SET_ROWS with its destination also as src[2], and without it (older
// clients); an in-place op (SCALE whose result is a view of its source),
// also read through a RESHAPE of it; a view (PERMUTE) of a tensor that is
// itself ggml's view but travels as a leaf: ggml points it at the root with
// the summed offset.
TEST_F(GgmlRpcTest, GgmlGraphFormsComputeAsGgml) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  auto a = c->Alloc(0, kBufferBytes);
  ASSERT_TRUE(a.ok() && a->remote_ptr != 0);
  const uint64_t buf = a->remote_ptr, base = a->base;
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i) x[i] = 1.0f + i;

  // SET_ROWS: row 2 of a 4 x 3 destination becomes b.
  GgmlTensor dst = Contiguous(1, 0, 4, {4, 3}, buf, base);
  GgmlTensor b = Contiguous(2, 0, 4, {4, 1}, buf, base + 256);
  GgmlTensor rows = Contiguous(3, 27, 8, {1}, buf, base + 512);  // I64
  GgmlTensor set = dst;
  set.id = 4;
  set.op = 42;  // SET_ROWS
  set.src[0] = 2;
  set.src[1] = 3;
  set.src[2] = 1;
  set.view_src = 1;
  ASSERT_TRUE(c->SetTensor(dst, 0, x.data(), 48).ok());
  const std::vector<float> row = {-1, -2, -3, -4};
  ASSERT_TRUE(c->SetTensor(b, 0, row.data(), 16).ok());
  const int64_t two = 2;
  ASSERT_TRUE(c->SetTensor(rows, 0, &two, 8).ok());
  ASSERT_TRUE(
      c->Send(kGraphCompute, GraphPayload(0, {4}, {dst, b, rows, set})).ok());
  std::vector<float> want = x;
  std::copy(row.begin(), row.end(), want.begin() + 8);
  EXPECT_EQ(Floats(*c, dst, 12), want);
  // The same without src[2], into row 0.
  set.src[2] = 0;
  const int64_t zero = 0;
  ASSERT_TRUE(c->SetTensor(rows, 0, &zero, 8).ok());
  ASSERT_TRUE(
      c->Send(kGraphCompute, GraphPayload(0, {4}, {dst, b, rows, set})).ok());
  std::copy(row.begin(), row.end(), want.begin());
  EXPECT_EQ(Floats(*c, dst, 12), want);

  // SCALE in place: the result is a view of its source, at its data.
  GgmlTensor src = Contiguous(5, 0, 4, {12}, buf, base + 1024);
  GgmlTensor scaled = src;
  scaled.id = 6;
  scaled.op = 32;  // SCALE
  scaled.src[0] = 5;
  scaled.view_src = 5;
  const float scale = 3.0f;
  std::memcpy(&scaled.op_params[0], &scale, 4);
  ASSERT_TRUE(c->SetTensor(src, 0, x.data(), 48).ok());
  ASSERT_TRUE(
      c->Send(kGraphCompute, GraphPayload(0, {6}, {src, scaled})).ok());
  for (int i = 0; i < 12; ++i) want[i] = 3 * x[i];
  EXPECT_EQ(Floats(*c, src, 12), want);
  // Read through a RESHAPE of the in-place result (ggml points the reshape
  // at the root, the SCALE's source), then added to itself.
  GgmlTensor shaped = Contiguous(11, 0, 4, {4, 3}, buf, base + 1024);
  shaped.op = 36;  // RESHAPE
  shaped.src[0] = 6;
  shaped.view_src = 5;
  GgmlTensor twice = Contiguous(12, 0, 4, {4, 3}, buf, base + 1536);
  twice.op = 2;  // ADD
  twice.src[0] = twice.src[1] = 11;
  ASSERT_TRUE(c->SetTensor(src, 0, x.data(), 48).ok());
  ASSERT_TRUE(c->Send(kGraphCompute,
                      GraphPayload(0, {6, 11, 12}, {src, scaled, shaped, twice}))
                  .ok());
  for (int i = 0; i < 12; ++i) want[i] = 6 * x[i];
  EXPECT_EQ(Floats(*c, twice, 12), want);

  // A leaf that is ggml's view (values 4..11 of a root), permuted (the
  // identity) and added to itself: the permute points at the root.
  GgmlTensor root = Contiguous(7, 0, 4, {12}, buf, base + 2048);
  GgmlTensor leaf = Contiguous(8, 0, 4, {8}, buf, base + 2048 + 16);
  leaf.view_src = 7;
  leaf.view_offs = 16;
  GgmlTensor permuted = leaf;
  permuted.id = 9;
  permuted.op = 38;  // PERMUTE
  permuted.src[0] = 8;
  permuted.view_src = 7;
  permuted.view_offs = 16;
  permuted.op_params[0] = 0;
  permuted.op_params[1] = 1;
  permuted.op_params[2] = 2;
  permuted.op_params[3] = 3;
  GgmlTensor sum = Contiguous(10, 0, 4, {8}, buf, base + 3072);
  sum.op = 2;  // ADD
  sum.src[0] = sum.src[1] = 9;
  ASSERT_TRUE(c->SetTensor(root, 0, x.data(), 48).ok());
  ASSERT_TRUE(c->Send(kGraphCompute,
                      GraphPayload(0, {9, 10}, {root, leaf, permuted, sum}))
                  .ok());
  std::vector<float> doubled;
  for (int i = 4; i < 12; ++i) doubled.push_back(2 * x[i]);
  EXPECT_EQ(Floats(*c, sum, 8), doubled);
  EXPECT_EQ(*c->DeviceCount(), 1u);
}

// Weights of ggml's 32-value blocks with a minimum or a fifth bit (Q4_1,
// Q5_0, Q5_1; llama.cpp's Q4_K_M files keep some tensors in Q5_0 where rows
// are not whole 256-value super-blocks) multiply through GRAPH_COMPUTE:
// MUL_MAT of a [64, 3] weight and two F32 columns, against the dot
// products of the dequantized weights. The daemon quantizes the columns to
// 8 bits per value, as ggml's CPU backend does: each sum is off by at most
// about 1/127 of a value's magnitude per term, within 2% of the largest
// result here.
TEST_F(GgmlRpcTest, BlockQuantWeightsMultiply) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  auto a = c->Alloc(0, kBufferBytes);
  ASSERT_TRUE(a.ok() && a->remote_ptr != 0);
  const uint64_t buf = a->remote_ptr, base = a->base;
  constexpr uint32_t kK = 64, kRows = 3, kCols = 2;
  std::vector<float> w(kK * kRows), x(kK * kCols);
  for (uint32_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * i) - 0.2f;
  for (uint32_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * i);
  const struct {
    uint32_t ggml_type;
    Type type;
  } cases[] = {{3, Type::kQ4_1}, {6, Type::kQ5_0}, {7, Type::kQ5_1}};
  for (const auto& tc : cases) {
    SCOPED_TRACE(TypeName(tc.type));
    const size_t row_bytes = RowSize(tc.type, kK);
    std::vector<uint8_t> wq(row_bytes * kRows);
    RowFromFloat(tc.type, w.data(), wq.data(), kK * kRows);
    std::vector<float> deq(w.size());
    RowToFloat(tc.type, wq.data(), deq.data(), kK * kRows);

    GgmlTensor weights = Contiguous(1, tc.ggml_type, Traits(tc.type).type_size,
                                    {kK, kRows}, buf, base);
    weights.nb[1] = static_cast<uint32_t>(row_bytes);
    weights.nb[2] = weights.nb[3] = static_cast<uint32_t>(row_bytes * kRows);
    GgmlTensor cols = Contiguous(2, 0, 4, {kK, kCols}, buf, base + 1024);
    GgmlTensor out = Contiguous(3, 0, 4, {kRows, kCols}, buf, base + 2048);
    out.op = 29;  // MUL_MAT
    out.src[0] = 1;
    out.src[1] = 2;
    ASSERT_TRUE(c->SetTensor(weights, 0, wq.data(), wq.size()).ok());
    ASSERT_TRUE(c->SetTensor(cols, 0, x.data(), 4 * x.size()).ok());
    ASSERT_TRUE(
        c->Send(kGraphCompute, GraphPayload(0, {3}, {weights, cols, out}))
            .ok());
    const std::vector<float> got = Floats(*c, out, kRows * kCols);
    std::vector<double> want(kRows * kCols);
    double largest = 0;
    for (uint32_t col = 0; col < kCols; ++col) {
      for (uint32_t r = 0; r < kRows; ++r) {
        double dot = 0;
        for (uint32_t i = 0; i < kK; ++i) {
          dot += static_cast<double>(deq[r * kK + i]) * x[col * kK + i];
        }
        want[col * kRows + r] = dot;
        largest = std::max(largest, std::fabs(dot));
      }
    }
    ASSERT_GT(largest, 1.0);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 0.02 * largest) << i;
    }
  }
}

// --device_memory_reserve holds for ALLOC_BUFFER as for AllocBuffer: with
// a reserve larger than the device, even 1 MiB (which the daemon of the
// other tests gives) gets ggml's null pointer, and the connection goes on.
TEST(GgmlRpcReserveTest, AllocBufferKeepsTheReserve) {
  auto daemon = StartWithListener("--device_memory_reserve=1099511627776");
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto c = GgmlRpcClient::Connect((*daemon)->ggml_rpc_port());
  ASSERT_TRUE(c.ok()) << c.status();
  auto a = (*c)->Alloc(0, 1 << 20);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->remote_ptr, 0u);
  std::vector<uint8_t> req;
  Put(req, 0, 4);
  EXPECT_TRUE((*c)->Call(kGetDeviceMemory, req, 16).ok());
}

// --session_memory_quota holds for each connection, a session of its own:
// an ALLOC_BUFFER over what is left gets ggml's null pointer and the
// connection goes on; another connection has its own quota; freeing
// gives the room back.
TEST(GgmlRpcQuotaTest, EachConnectionHasTheSessionQuota) {
  auto daemon = StartWithListener("--session_memory_quota=1M");
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto first = GgmlRpcClient::Connect((*daemon)->ggml_rpc_port());
  auto second = GgmlRpcClient::Connect((*daemon)->ggml_rpc_port());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  auto half = (*first)->Alloc(0, 512 << 10);
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_NE(half->remote_ptr, 0u);
  auto over = (*first)->Alloc(0, 768 << 10);
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_EQ(over->remote_ptr, 0u);
  EXPECT_TRUE((*first)->DeviceCount().ok());
  auto other = (*second)->Alloc(0, 768 << 10);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_NE(other->remote_ptr, 0u);
  ASSERT_TRUE((*first)->Call(kFreeBuffer, U64(half->remote_ptr), 0).ok());
  auto again = (*first)->Alloc(0, 768 << 10);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(again->remote_ptr, 0u);
}

// --ggml_rpc_max_connections: a connection over the cap is closed at once;
// once one of the others ends, the next is served.
TEST(GgmlRpcConnectionCapTest, OverTheCapIsClosedUntilOneEnds) {
  auto daemon = StartWithListener("--ggml_rpc_max_connections=2");
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const int port = (*daemon)->ggml_rpc_port();
  auto first = GgmlRpcClient::Connect(port);
  auto second = GgmlRpcClient::Connect(port);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  auto third = GgmlRpcClient::ConnectRaw(port);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE((*third)->ClosedByServer());
  EXPECT_TRUE((*first)->DeviceCount().ok());
  first->reset();
  // Time for the daemon to see the first end, well within the listener's
  // idle poll (1 s): the next connection finds the ended one still listed
  // unless the listener looks again when it comes.
  absl::SleepFor(absl::Milliseconds(300));
  auto fourth = GgmlRpcClient::Connect(port);
  ASSERT_TRUE(fourth.ok()) << fourth.status();
  EXPECT_TRUE((*fourth)->DeviceCount().ok());
  EXPECT_TRUE((*second)->DeviceCount().ok());
}

// SIGTERM while a ggml-rpc command is in flight (a SET_TENSOR whose bytes
// are still coming): the daemon waits for it, refusing new connections
// meanwhile (no new sessions while draining), and exits 0 once it is whole.
TEST(GgmlRpcDrainTest, SigtermWaitsForTheCommandInFlight) {
  auto daemon = StartWithListener("--drain_timeout=60s");
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const int port = (*daemon)->ggml_rpc_port();
  auto c = GgmlRpcClient::Connect(port);
  ASSERT_TRUE(c.ok()) << c.status();
  auto a = (*c)->Alloc(0, 1 << 20);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NE(a->remote_ptr, 0u);
  constexpr uint32_t kBytes = 1 << 16;
  std::vector<uint8_t> head = {kSetTensor};
  Put(head, kGgmlTensorBytes + 8 + kBytes, 8);
  Put(head, Encode(Bytes(*a, 0, kBytes)));
  Put(head, 0, 8);
  const std::vector<uint8_t> data(kBytes, 7);
  ASSERT_TRUE((*c)->SendRaw(head.data(), head.size()).ok());
  ASSERT_TRUE((*c)->SendRaw(data.data(), kBytes / 2).ok());
  absl::SleepFor(absl::Milliseconds(200));  // the daemon reads the header
  ASSERT_TRUE((*daemon)->Kill(SIGTERM).ok());
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE((*daemon)->IsRunning());
  EXPECT_FALSE(GgmlRpcClient::Connect(port).ok());
  ASSERT_TRUE((*c)->SendRaw(data.data() + kBytes / 2, kBytes / 2).ok());
  absl::StatusOr<int> wait_status = (*daemon)->Wait(absl::Seconds(30));
  ASSERT_TRUE(wait_status.ok()) << wait_status.status();
  EXPECT_TRUE(WIFEXITED(*wait_status) && WEXITSTATUS(*wait_status) == 0)
      << *wait_status;
}

// Each command's calls are counted under its own label, as each gRPC
// method's are; a byte that is no command counts as "other".
TEST(GgmlRpcMetricsTest, CommandsAreCountedByName) {
  const int metrics_port = FreePort();
  auto daemon = StartWithListener(
      absl::StrCat("--metrics_listen=127.0.0.1:", metrics_port));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto c = GgmlRpcClient::Connect((*daemon)->ggml_rpc_port());
  ASSERT_TRUE(c.ok()) << c.status();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*c)->DeviceCount().ok());
  const uint8_t no_command = 200;
  ASSERT_TRUE((*c)->SendRaw(&no_command, 1).ok());
  EXPECT_TRUE((*c)->ClosedByServer());
  std::map<std::string, double> series = Scrape(metrics_port);
  EXPECT_EQ(series["tessera_rpcs_total{method=\"/ggml_rpc/DEVICE_COUNT\","
                   "code=\"OK\"}"],
            3);
  EXPECT_EQ(series["tessera_rpc_duration_seconds_count{method=\"/ggml_rpc/"
                   "DEVICE_COUNT\"}"],
            3);
  EXPECT_EQ(series["tessera_rpcs_total{method=\"other\","
                   "code=\"INVALID_ARGUMENT\"}"],
            1);
}

// A listen address beyond loopback needs --insecure.
TEST(GgmlRpcExposureTest, RefusesNonLoopbackWithoutInsecure) {
  auto daemon = DaemonProcess::Start(
      {"--devices=cpu", "--ggml_rpc_listen=0.0.0.0:0"}, absl::Seconds(30));
  EXPECT_FALSE(daemon.ok());
}

}  // namespace
}  // namespace tessera::testing
