// tesserad's ggml-rpc listener against a client written from the protocol's
// definition (ggml_rpc_client.h), with the daemon as a real process.

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/ggml_rpc/ggml_rpc_client.h"
#include "tests/ggml_rpc/llama_graph.h"
#include "tests/integration/daemon_process.h"

namespace tessera::testing {
namespace {

constexpr uint64_t kBufferBytes = 1 << 16;

class GgmlRpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cache_dir_ = new std::string(absl::StrCat(
        std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
        "/ggml_rpc_cache"));
    auto daemon = DaemonProcess::Start(
        {"--devices=cpu", "--ggml_rpc_listen=127.0.0.1:0",
         absl::StrCat("--cache_dir=", *cache_dir_)});
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
  const uint64_t before = FreeMemory(*watcher);
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

// A listen address beyond loopback needs --insecure.
TEST(GgmlRpcExposureTest, RefusesNonLoopbackWithoutInsecure) {
  auto daemon = DaemonProcess::Start(
      {"--devices=cpu", "--ggml_rpc_listen=0.0.0.0:0"}, absl::Seconds(30));
  EXPECT_FALSE(daemon.ok());
}

}  // namespace
}  // namespace tessera::testing
