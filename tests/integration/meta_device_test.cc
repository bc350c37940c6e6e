// A daemon's tensor-parallel meta device (--devices=...,tp0=meta(cpu0,cpu1))
// through the protocol: ListDevices names its members; a client writes a
// LLaMA-shaped layer stack's weights with LlamaSplitPolicy, so the daemon
// scatters each over the members, and runs the stack with one-shot Compute
// and with a registered graph over Execute, both equal to the stack
// computed locally on one CPU device; split states that do not fit are
// INVALID_ARGUMENT naming the problem, and the daemon keeps serving.

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/assembly/device_spec.h"
#include "backend/meta/llama_policy.h"
#include "client/client.h"
#include "client/graph_encoder.h"
#include "client/remote_buffer.h"
#include "client/remote_device.h"
#include "client/remote_graph.h"
#include "gmock/gmock.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "gtest/gtest.h"
#include "proto/split_state_codec.h"
#include "sched/testing/models.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/llama_stack.h"

namespace tessera {
namespace {

using client::Client;
using client::RemoteDevice;
using client::RemoteGraph;
using client::TensorInput;
using client::TensorOutput;
using ::testing::HasSubstr;
using testing::LlamaStack;
using testing::Local;
using testing::Nmse;

class MetaDaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    daemon_ = testing::DaemonProcess::Start(
                  {"--devices=cpu:2,tp0=meta(cpu0,cpu1)", "--threads=1"})
                  .value()
                  .release();
    client_ = Client::Connect(daemon_->address()).value().release();
    remote_ = new std::vector<std::unique_ptr<RemoteDevice>>(
        RemoteDevice::ListAll(*client_).value());
  }
  static void TearDownTestSuite() {
    delete remote_;
    delete client_;
    delete daemon_;
  }

  static RemoteDevice& Named(const std::string& name) {
    for (auto& d : *remote_) {
      if (d->remote_name() == name) return *d;
    }
    ADD_FAILURE() << "no device " << name;
    return *remote_->front();
  }
  // tp0 with the LLaMA policy over its 2 members.
  static RemoteDevice& Tp0() {
    RemoteDevice& tp0 = Named("tp0");
    EXPECT_TRUE(
        tp0.SetSplitPolicy(LlamaSplitPolicy(2, LlamaStack::SplitOptions()))
            .ok());
    return tp0;
  }

  static testing::DaemonProcess* daemon_;
  static Client* client_;
  static std::vector<std::unique_ptr<RemoteDevice>>* remote_;
};

testing::DaemonProcess* MetaDaemonTest::daemon_ = nullptr;
Client* MetaDaemonTest::client_ = nullptr;
std::vector<std::unique_ptr<RemoteDevice>>* MetaDaemonTest::remote_ = nullptr;

TEST_F(MetaDaemonTest, ListsTheMetaDeviceWithItsMembers) {
  std::vector<v1::DeviceInfo> devices = client_->ListDevices().value();
  ASSERT_EQ(devices.size(), 3u);
  const v1::DeviceInfo& tp0 = devices[2];
  EXPECT_EQ(tp0.name(), "tp0");
  EXPECT_EQ(tp0.type(), v1::DeviceInfo::META);
  ASSERT_EQ(tp0.members_size(), 2);
  EXPECT_EQ(tp0.members(0), "cpu0");
  EXPECT_EQ(tp0.members(1), "cpu1");
  EXPECT_EQ(devices[0].members_size(), 0);
  EXPECT_TRUE(Named("tp0").is_meta());
  EXPECT_EQ(Named("tp0").Props().members,
            (std::vector<std::string>{"cpu0", "cpu1"}));
  EXPECT_FALSE(Named("cpu0").is_meta());
  EXPECT_EQ(Named("cpu0").SetSplitPolicy(MirroredPolicy()).code(),
            absl::StatusCode::kFailedPrecondition);
}

// Device memory a member of tp0 has in use, as the daemon reports it.
uint64_t MemberUsed(Client& client, const std::string& member) {
  const std::vector<v1::DeviceInfo> devices = client.ListDevices().value();
  for (const v1::DeviceInfo& d : devices) {
    if (d.name() == member) return d.memory_total() - d.memory_free();
  }
  ADD_FAILURE() << "no device " << member;
  return 0;
}

// Weights placed with the split policy are packed: each member holds its
// half of the split matrices (and the small mirrored norms), not the whole.
TEST_F(MetaDaemonTest, PlacedWeightsTakeTheMembersSlicesOnly) {
  const uint64_t before0 = MemberUsed(*client_, "cpu0");
  const uint64_t before1 = MemberUsed(*client_, "cpu1");
  std::optional<LlamaStack> stack(std::in_place, Tp0());
  size_t total = 0;
  for (const Tensor* w : stack->weights) total += w->NumBytes();
  EXPECT_GE(stack->buffer->size(), total);
  for (uint64_t used : {MemberUsed(*client_, "cpu0") - before0,
                        MemberUsed(*client_, "cpu1") - before1}) {
    EXPECT_GE(used, total * 4 / 10);
    EXPECT_LE(used, total * 6 / 10);
  }
  // Still computed right.
  const LlamaStack::Inputs in = LlamaStack::MakeInputs(0);
  std::vector<float> out(stack->y->NumElements());
  absl::Status s =
      client_->Compute(stack->graph, stack->Bind(in),
                       {{stack->y, out.data(), out.size() * sizeof(float)}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_LT(Nmse(out, Local(0)), 1e-10);
  stack.reset();
  EXPECT_EQ(MemberUsed(*client_, "cpu0"), before0);
  EXPECT_EQ(MemberUsed(*client_, "cpu1"), before1);
}

TEST_F(MetaDaemonTest, LayerStackWithComputeEqualsOneDevice) {
  LlamaStack stack(Tp0());
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(k);
    const LlamaStack::Inputs in = LlamaStack::MakeInputs(k);
    std::vector<float> out(stack.y->NumElements());
    absl::Status s =
        client_->Compute(stack.graph, stack.Bind(in),
                         {{stack.y, out.data(), out.size() * sizeof(float)}});
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_LT(Nmse(out, Local(k)), 1e-10);
  }
}

TEST_F(MetaDaemonTest, LayerStackOverExecuteEqualsOneDevice) {
  LlamaStack stack(Tp0());
  auto graph = RemoteGraph::Register(*client_, stack.graph,
                                     {.n_copies = 2, .devices = {"tp0"}})
                   .value();
  // Every op runs on tp0 (the inputs arrive on the CPU fallback): one
  // split.
  EXPECT_EQ(graph->n_splits(), 1u);
  uint64_t tp0_bytes = 0;
  for (const auto& [device, bytes] : graph->compute_bytes()) {
    if (device == "tp0") tp0_bytes = bytes;
  }
  EXPECT_GT(tp0_bytes, 0u);
  constexpr int kRuns = 4;
  std::vector<LlamaStack::Inputs> ins;
  for (int k = 0; k < kRuns; ++k) ins.push_back(LlamaStack::MakeInputs(k));
  for (int k = 0; k < kRuns; ++k) {
    ASSERT_TRUE(graph->Submit(stack.Bind(ins[k]), {stack.y}).ok());
  }
  for (int k = 0; k < kRuns; ++k) {
    SCOPED_TRACE(k);
    std::vector<float> out(stack.y->NumElements());
    absl::Status s =
        graph->Receive({{stack.y, out.data(), out.size() * sizeof(float)}});
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_LT(Nmse(out, Local(k)), 1e-10);
  }
}

// The same weights written without a policy (MIRRORED on every member)
// compute the same values too: the states the graph names decide.
TEST_F(MetaDaemonTest, MirroredWeightsEqualOneDevice) {
  RemoteDevice& tp0 = Named("tp0");
  ASSERT_TRUE(tp0.SetSplitPolicy(nullptr).ok());
  LlamaStack stack(tp0);
  const LlamaStack::Inputs in = LlamaStack::MakeInputs(0);
  std::vector<float> out(stack.y->NumElements());
  ASSERT_TRUE(client_
                  ->Compute(stack.graph, stack.Bind(in),
                            {{stack.y, out.data(), out.size() * sizeof(float)}})
                  .ok());
  EXPECT_LT(Nmse(out, Local(0)), 1e-10);
}

// A [64, 8] F32 tensor written to `buffer` with `split`.
absl::Status WriteSplit(Client& client, uint64_t buffer, SplitState split,
                        std::vector<int64_t> ne = {64, 8},
                        uint64_t size = 64 * 8 * 4) {
  std::vector<float> data(size / 4, 1.0f);
  v1::TensorRef ref;
  ref.set_buffer(buffer);
  const v1::TensorLayout layout = wire::ToProto(
      wire::TensorLayout{.type = Type::kF32, .ne = ne, .split = split});
  return client.WriteTensor(ref, data.data(), size, {.layout = &layout});
}

void ExpectInvalid(const absl::Status& s, absl::string_view words) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(words));
}

// A placed f32 [64, 8] tensor at `offset` with `split`.
v1::PlacedTensor Placed(uint64_t offset, const SplitState& split) {
  v1::PlacedTensor p;
  p.set_offset(offset);
  *p.mutable_layout() = wire::ToProto(
      wire::TensorLayout{.type = Type::kF32, .ne = {64, 8}, .split = split});
  return p;
}

TEST_F(MetaDaemonTest, BadPlacementsAreInvalid) {
  const SplitState rows = SplitState::Even(1, 8, 2).value();
  auto alloc = [&](const std::string& device, uint64_t size,
                   std::vector<v1::PlacedTensor> placed) {
    return client_
        ->AllocBuffer(device, size, BufferUsage::kWeights, "", placed)
        .status();
  };
  EXPECT_TRUE(alloc("tp0", 4096, {Placed(0, rows), Placed(2048, rows)}).ok());
  ExpectInvalid(alloc("cpu0", 4096, {Placed(0, rows)}), "not a meta device");
  ExpectInvalid(alloc("tp0", 4096, {Placed(0, rows), Placed(1024, rows)}),
                "overlap");
  ExpectInvalid(alloc("tp0", 4096, {Placed(4, rows)}), "not aligned");
  ExpectInvalid(alloc("tp0", 2047, {Placed(0, rows)}), "inside the buffer");
  ExpectInvalid(alloc("tp0", 4096, {Placed(0, SplitState::Even(1, 9, 2)
                                                  .value())}),
                "placed tensor 0");
  v1::PlacedTensor no_type = Placed(0, rows);
  no_type.mutable_layout()->set_type(999);
  ExpectInvalid(alloc("tp0", 4096, {no_type}), "placed tensor 0: layout");
}

TEST_F(MetaDaemonTest, BadSplitWritesAreInvalid) {
  const uint64_t meta =
      client_->AllocBuffer("tp0", 1 << 16, BufferUsage::kWeights)
          .value()
          .handle;
  const uint64_t cpu =
      client_->AllocBuffer("cpu0", 1 << 16, BufferUsage::kWeights)
          .value()
          .handle;
  ASSERT_TRUE(
      WriteSplit(*client_, meta, SplitState::Even(1, 8, 2).value()).ok());
  // Not a meta device.
  ExpectInvalid(WriteSplit(*client_, cpu, SplitState::Even(1, 8, 2).value()),
                "cpu0, which is not a meta device");
  // Lengths that do not add up to the extent.
  SplitState short_split{.axis = SplitAxis::kAxis0, .lengths = {32, 16}};
  ExpectInvalid(WriteSplit(*client_, meta, short_split),
                "lengths add up to 48, not 64");
  // A member count the device does not have.
  ExpectInvalid(WriteSplit(*client_, meta, SplitState::Even(0, 64, 4).value()),
                "over 2 members: need 2 lengths per segment");
  // Segments that do not add up.
  SplitState segs{.axis = SplitAxis::kAxis0,
                  .n_segments = 3,
                  .lengths = {16, 16, 8, 8, 8, 4}};
  ExpectInvalid(WriteSplit(*client_, meta, segs), "add up to 60, not 64");
  // A split axis beyond the shape's, a block-cutting split, a bad size.
  ExpectInvalid(WriteSplit(*client_, meta, SplitState::Even(3, 2, 2).value()),
                "lengths add up to more than 1");
  ExpectInvalid(WriteSplit(*client_, meta, SplitState::Even(1, 8, 2).value(),
                           {64, 8}, 100),
                "for a write of 100 bytes");
  v1::TensorLayout partial = wire::ToProto(wire::TensorLayout{
      .type = Type::kF32, .ne = {4}, .split = SplitState::Partial()});
  partial.mutable_split()->add_lengths(4);
  v1::TensorRef ref;
  ref.set_buffer(meta);
  const float four[4] = {};
  ExpectInvalid(client_->WriteTensor(ref, four, 16, {.layout = &partial}),
                "PARTIAL with an axis, segments or lengths");
  EXPECT_TRUE(client_->ListDevices().ok());
}

TEST_F(MetaDaemonTest, BadGraphSplitsAreInvalid) {
  LlamaStack stack(Tp0());
  client::EncodedGraph encoded =
      client::EncodeGraph(stack.graph, *client_, false).value();
  const uint32_t wq = encoded.IdOf(stack.layers[0].wq).value();
  const uint32_t x = encoded.IdOf(stack.x).value();
  const uint32_t y = encoded.IdOf(stack.y).value();
  // The policy's state travels with the weight.
  ASSERT_TRUE(encoded.def.tensors(wq).has_split());
  EXPECT_EQ(encoded.def.tensors(wq).split().kind(), v1::SplitStateDef::AXIS);
  auto compute = [&](const v1::GraphDef& def) {
    v1::ComputeRequest request;
    *request.mutable_graph() = def;
    const LlamaStack::Inputs in = LlamaStack::MakeInputs(0);
    for (const TensorInput& input : stack.Bind(in)) {
      v1::TensorData* d = request.add_inputs();
      d->set_id(encoded.IdOf(input.tensor).value());
      d->set_data(input.data, input.size);
    }
    request.add_outputs(y);
    v1::ComputeResponse response;
    return client_->Compute(request, response);
  };
  ASSERT_TRUE(compute(encoded.def).ok());
  // Another split than the data was written with.
  v1::GraphDef def = encoded.def;
  *def.mutable_tensors(wq)->mutable_split() =
      wire::ToProto(SplitState::Even(0, LlamaStack::kDim, 2).value());
  ExpectInvalid(compute(def), "is not the one its data has: split(1: 32,32)");
  // A split that does not fit the shape, a member count the device lacks.
  *def.mutable_tensors(wq)->mutable_split() =
      wire::ToProto(SplitState::Even(1, 32, 2).value());
  ExpectInvalid(compute(def), "lengths add up to 32, not 64");
  *def.mutable_tensors(wq)->mutable_split() =
      wire::ToProto(SplitState::Even(1, 64, 4).value());
  ExpectInvalid(compute(def), "over 2 members: need 2 lengths per segment");
  // A split state on an input, which has no data.
  def = encoded.def;
  *def.mutable_tensors(x)->mutable_split() =
      wire::ToProto(SplitState::Mirrored());
  ExpectInvalid(compute(def), "(\"x\"): a split state without data");
  // The daemon still computes the good graph.
  EXPECT_TRUE(compute(encoded.def).ok());
}

// A split weight is written and read whole (scattered and gathered by the
// daemon), not in parts; a mirrored one also in parts.
TEST_F(MetaDaemonTest, SplitWeightsAreWrittenWhole) {
  LlamaStack stack(Tp0());
  Tensor* wq = stack.layers[0].wq;
  std::vector<float> row(wq->ne[0], 1.0f);
  ExpectInvalid(wq->buffer->SetTensor(*wq, row.data(), 0, row.size() * 4),
                "write it whole and contiguous");
  std::vector<float> whole(wq->NumElements());
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = 0.25f * (i % 97);
  ASSERT_TRUE(testing::Write(*wq, whole.data()).ok());
  std::vector<float> back(wq->NumElements());
  ASSERT_TRUE(
      wq->buffer->GetTensor(*wq, back.data(), 0, wq->NumBytes()).ok());
  EXPECT_EQ(back, whole);
  ExpectInvalid(wq->buffer->GetTensor(*wq, back.data(), 0, 64),
                "read it whole and contiguous");
  // A layout other than the one written is refused by the daemon.
  auto* remote = static_cast<client::RemoteBuffer*>(wq->buffer);
  const v1::TensorLayout mirrored = wire::ToProto(wire::TensorLayout{
      .type = wq->type,
      .ne = {wq->ne, wq->ne + kMaxDims},
      .split = SplitState::Mirrored(),
  });
  ExpectInvalid(client_->ReadTensor(remote->RefOf(*wq).value(), back.data(),
                                    wq->NumBytes(), &mirrored),
                "was not written");
  Tensor* norm = stack.output_norm;
  std::vector<float> ones(norm->NumElements(), 1.0f);
  ASSERT_TRUE(norm->buffer->SetTensor(*norm, ones.data(), 0, 16).ok());
  std::vector<float> got(norm->NumElements());
  ASSERT_TRUE(
      norm->buffer->GetTensor(*norm, got.data(), 0, norm->NumBytes()).ok());
  EXPECT_EQ(got[0], 1.0f);
}

}  // namespace
}  // namespace tessera
