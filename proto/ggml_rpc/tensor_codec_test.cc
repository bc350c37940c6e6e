#include "proto/ggml_rpc/tensor_codec.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "graph/tensor.h"
#include "proto/ggml_rpc/numbering.h"

namespace tessera::ggml_rpc {
namespace {

constexpr uint64_t kBuffer = 7;
constexpr uint64_t kBase = 0x100000;

WireTensor F32(uint64_t id, uint32_t n, uint64_t data) {
  WireTensor t = {};
  t.id = id;
  t.type = 0;
  t.ne[0] = n;
  t.ne[1] = t.ne[2] = t.ne[3] = 1;
  t.nb[0] = 4;
  for (int i = 1; i < kMaxDims; ++i) t.nb[i] = 4 * n;
  t.buffer = data == 0 ? 0 : kBuffer;
  t.data = data;
  return t;
}

std::vector<uint8_t> Payload(const std::vector<uint64_t>& nodes,
                             const std::vector<WireTensor>& tensors) {
  std::vector<uint8_t> out(kGraphHeaderBytes + nodes.size() * 8 + 4 +
                           tensors.size() * sizeof(WireTensor));
  uint8_t* p = out.data();
  const uint32_t device = 0, n_nodes = nodes.size(), n = tensors.size();
  std::memcpy(p, &device, 4);
  std::memcpy(p + 4, &n_nodes, 4);
  std::memcpy(p + 8, nodes.data(), nodes.size() * 8);
  std::memcpy(p + 8 + nodes.size() * 8, &n, 4);
  if (!tensors.empty()) {
    std::memcpy(p + 12 + nodes.size() * 8, tensors.data(),
                tensors.size() * sizeof(WireTensor));
  }
  return out;
}

absl::StatusOr<v1::TensorRef> Place(uint64_t buffer, uint64_t data,
                                    uint64_t bytes) {
  if (buffer != kBuffer || data < kBase || data - kBase + bytes > 4096) {
    return absl::InvalidArgumentError("outside");
  }
  v1::TensorRef ref;
  ref.set_buffer(buffer);
  ref.set_offset(data - kBase);
  return ref;
}

TEST(TensorCodecTest, MapsOpsSourcesAndData) {
  // Sources listed after the node that reads them: ordered on the way.
  WireTensor sum = F32(30, 4, kBase + 64);
  sum.op = 2;  // GGML_OP_ADD
  sum.src[0] = 10;
  sum.src[1] = 20;
  WireTensor act = F32(40, 4, kBase + 128);
  act.op = 91;  // GGML_OP_UNARY
  act.op_params[0] = 10;  // GGML_UNARY_OP_SILU
  act.src[0] = 30;
  auto parsed = ParseGraph(
      Payload({30, 40}, {sum, act, F32(10, 4, kBase), F32(20, 4, kBase + 16)}),
      64, Place);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const v1::GraphDef& def = parsed->def;
  ASSERT_EQ(def.tensors_size(), 4);
  EXPECT_EQ(def.tensors(2).op(), static_cast<int32_t>(Op::kAdd));
  EXPECT_EQ(def.tensors(2).src(0), 0);
  EXPECT_EQ(def.tensors(2).src(1), 1);
  EXPECT_EQ(def.tensors(3).op(), static_cast<int32_t>(Op::kUnary));
  EXPECT_EQ(def.tensors(3).op_params(0), static_cast<int32_t>(UnaryOp::kSilu));
  EXPECT_EQ(def.tensors(1).data().offset(), 16u);
  ASSERT_EQ(def.nodes_size(), 2);
  EXPECT_EQ(def.nodes(0), 2u);
}

TEST(TensorCodecTest, RefusesWhatItCannotMap) {
  WireTensor node = F32(30, 4, kBase + 64);
  node.src[0] = 10;
  const WireTensor leaf = F32(10, 4, kBase);
  auto refuse = [&](WireTensor n, const char* why) {
    auto parsed = ParseGraph(Payload({30}, {leaf, n}), 64, Place);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << why;
  };
  WireTensor t = node;
  t.op = 3;  // ADD_ID
  refuse(t, "unsupported op");
  t.op = 101;
  refuse(t, "op past the enum");
  t = node;
  t.op = 91;
  t.op_params[0] = 0;  // GGML_UNARY_OP_ABS
  refuse(t, "unsupported unary op");
  t = node;
  t.op = 2;
  t.src[1] = 99;
  refuse(t, "unknown source");
  t = node;
  t.op = 2;
  t.src[1] = 30;
  refuse(t, "a cycle");
  t = node;
  t.op = 2;
  t.src[1] = 10;
  t.data = kBase + 8192;
  refuse(t, "data outside the buffer");
  t = node;
  t.op = 2;
  t.src[1] = 10;
  t.type = 9;  // Q8_1
  refuse(t, "unsupported type");

  std::vector<uint8_t> payload = Payload({30}, {leaf, node});
  payload.pop_back();
  EXPECT_FALSE(ParseGraph(payload, 64, Place).ok()) << "short payload";
  EXPECT_FALSE(ParseGraph(Payload({30}, {leaf, node}), 1, Place).ok())
      << "over max_tensors";
  EXPECT_FALSE(ParseGraph(Payload({30}, {}), 64, Place).ok()) << "no tensors";
  EXPECT_FALSE(ParseGraph(Payload({30, 10}, {node}), 64, Place).ok())
      << "fewer tensors than nodes";
}

TEST(TensorCodecTest, TensorBytesFollowsStrides) {
  WireTensor t = F32(1, 8, 0);
  t.ne[1] = 3;
  t.nb[2] = t.nb[3] = 96;
  EXPECT_EQ(*TensorBytes(t), 96u);
  t.type = 8;  // Q8_0: 34 bytes per 32 values
  t.ne[0] = 64;
  t.ne[1] = 1;
  t.nb[0] = 34;
  EXPECT_EQ(*TensorBytes(t), 68u);
  t.ne[0] = 33;
  EXPECT_FALSE(TensorBytes(t).ok());
}

}  // namespace
}  // namespace tessera::ggml_rpc
