#include "backend/comm/host_communicator.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/cpu/cpu_registry.h"
#include "backend/registry.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/type.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

// N CPU devices (one thread each), a stream of each and a communicator
// over them, plus the tensors a test allocates on them.
struct Members {
  Registry registry;
  std::vector<Device*> devices;
  std::vector<std::unique_ptr<Stream>> owned_streams;
  std::vector<Stream*> streams;
  std::vector<std::unique_ptr<Buffer>> buffers;
  Context ctx;
  // Destroyed first: the streams have run everything (see SyncAll).
  std::unique_ptr<HostCommunicator> comm;

  ~Members() {
    for (Stream* s : streams) (void)s->Synchronize();
    comm.reset();
  }

  // One tensor of `type` and shape `ne` on each rank, in the rank's memory.
  std::vector<Tensor*> NewTensors(Type type, std::vector<int64_t> ne) {
    std::vector<Tensor*> tensors;
    for (Device* device : devices) {
      Tensor* t = ctx.NewTensor(type, ne).value();
      buffers.push_back(AllocTensors(device->buffer_type(), {t}).value());
      tensors.push_back(t);
    }
    return tensors;
  }

  std::vector<absl::Status> SyncAll() {
    std::vector<absl::Status> statuses;
    for (Stream* s : streams) statuses.push_back(s->Synchronize());
    return statuses;
  }
};

std::unique_ptr<Members> MakeMembers(int n) {
  auto m = std::make_unique<Members>();
  EXPECT_TRUE(AddCpuDevices(n, 1, m->registry).ok());
  for (Device* d : m->registry.devices()) {
    m->devices.push_back(d);
    m->owned_streams.push_back(d->CreateStream().value());
    m->streams.push_back(m->owned_streams.back().get());
  }
  m->comm = HostCommunicator::Create(m->devices).value();
  return m;
}

// Deterministic values in [-1, 1), rounded to `type`.
std::vector<float> Pattern(Type type, size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  std::vector<char> bytes(RowSize(type, n));
  RowFromFloat(type, v.data(), bytes.data(), n);
  RowToFloat(type, bytes.data(), v.data(), n);
  return v;
}

std::vector<char> Encode(Type type, const std::vector<float>& values) {
  std::vector<char> bytes(RowSize(type, values.size()));
  RowFromFloat(type, values.data(), bytes.data(), values.size());
  return bytes;
}

std::vector<float> Decode(Type type, const std::vector<char>& bytes) {
  const size_t n = bytes.size() / RowSize(type, 1);
  std::vector<float> values(n);
  RowToFloat(type, bytes.data(), values.data(), n);
  return values;
}

// Distance allowed between a reduced value and the exact sum `exact` of
// inputs whose magnitudes sum to `abs_sum` over `ranks` ranks: one
// rounding to `type` plus the F32 accumulation's error.
double Tolerance(Type type, double exact, double abs_sum, int ranks) {
  const double f32_error = ranks * std::ldexp(abs_sum, -24);
  if (type == Type::kF32) return 2 * f32_error;
  const int mantissa = type == Type::kF16 ? 10 : 7;
  const int min_exp = type == Type::kF16 ? -14 : -126;
  const int e = exact == 0 ? min_exp : std::max(std::ilogb(exact), min_exp);
  return 0.5 * std::ldexp(1.0, e - mantissa) + 2 * f32_error;
}

// Checks `got` against the sums of `inputs` (per rank) over elements
// [begin, begin + got.size()).
void ExpectSums(Type type, const std::vector<std::vector<float>>& inputs,
                size_t begin, const std::vector<float>& got,
                const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    double exact = 0, abs_sum = 0;
    for (const auto& in : inputs) {
      exact += in[begin + i];
      abs_sum += std::fabs(in[begin + i]);
    }
    const double tolerance =
        Tolerance(type, exact, abs_sum, static_cast<int>(inputs.size()));
    if (!(std::fabs(got[i] - exact) <= tolerance)) {
      ADD_FAILURE() << what << " element " << begin + i << ": got " << got[i]
                    << ", exact sum " << exact << ", tolerance " << tolerance;
      ++bad;
    }
  }
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t i = 0; i < statuses.size(); ++i) {
    EXPECT_TRUE(statuses[i].ok()) << "rank " << i << ": " << statuses[i];
  }
}

using Case = std::tuple<int, Type, int64_t>;  // ranks, type, elements

class CollectiveTest : public testing::TestWithParam<Case> {
 protected:
  int ranks() const { return std::get<0>(GetParam()); }
  Type type() const { return std::get<1>(GetParam()); }
  int64_t count() const { return std::get<2>(GetParam()); }
};

TEST_P(CollectiveTest, AllReduceSumsOnEveryRank) {
  auto m = MakeMembers(ranks());
  const Type type = this->type();
  std::vector<Tensor*> t = m->NewTensors(type, {count()});
  std::vector<std::vector<float>> in;
  std::vector<std::vector<char>> bytes, out(ranks());
  for (int r = 0; r < ranks(); ++r) {
    in.push_back(Pattern(type, count(), r + 1));
    bytes.push_back(Encode(type, in[r]));
    out[r].resize(bytes[r].size());
  }
  for (int r = 0; r < ranks(); ++r) {
    ASSERT_TRUE(m->streams[r]
                    ->SetTensorAsync(*t[r], bytes[r].data(), 0, bytes[r].size())
                    .ok());
  }
  ASSERT_TRUE(m->comm->AllReduce(m->streams, t).ok());
  for (int r = 0; r < ranks(); ++r) {
    ASSERT_TRUE(m->streams[r]
                    ->GetTensorAsync(*t[r], out[r].data(), 0, out[r].size())
                    .ok());
  }
  ExpectAllOk(m->SyncAll());
  for (int r = 0; r < ranks(); ++r) {
    ExpectSums(type, in, 0, Decode(type, out[r]), absl::StrCat("rank ", r));
    EXPECT_EQ(out[r], out[0]) << "rank " << r << " differs from rank 0";
  }
}

TEST_P(CollectiveTest, ReduceScatterSumsEachRanksBlock) {
  auto m = MakeMembers(ranks());
  const Type type = this->type();
  std::vector<Tensor*> send = m->NewTensors(type, {count() * ranks()});
  std::vector<Tensor*> recv = m->NewTensors(type, {count()});
  std::vector<std::vector<float>> in;
  for (int r = 0; r < ranks(); ++r) {
    in.push_back(Pattern(type, count() * ranks(), 10 + r));
    const std::vector<char> bytes = Encode(type, in[r]);
    ASSERT_TRUE(send[r]
                    ->buffer->SetTensor(*send[r], bytes.data(), 0, bytes.size())
                    .ok());
  }
  ASSERT_TRUE(m->comm->ReduceScatter(m->streams, send, recv).ok());
  ExpectAllOk(m->SyncAll());
  for (int r = 0; r < ranks(); ++r) {
    std::vector<char> out(recv[r]->NumBytes());
    ASSERT_TRUE(
        recv[r]->buffer->GetTensor(*recv[r], out.data(), 0, out.size()).ok());
    ExpectSums(type, in, r * count(), Decode(type, out),
               absl::StrCat("rank ", r));
  }
}

TEST_P(CollectiveTest, AllGatherConcatenatesInRankOrder) {
  auto m = MakeMembers(ranks());
  const Type type = this->type();
  std::vector<Tensor*> send = m->NewTensors(type, {count()});
  std::vector<Tensor*> recv = m->NewTensors(type, {count() * ranks()});
  std::vector<char> expected;
  for (int r = 0; r < ranks(); ++r) {
    const std::vector<char> bytes =
        Encode(type, Pattern(type, count(), 20 + r));
    ASSERT_TRUE(send[r]
                    ->buffer->SetTensor(*send[r], bytes.data(), 0, bytes.size())
                    .ok());
    expected.insert(expected.end(), bytes.begin(), bytes.end());
  }
  ASSERT_TRUE(m->comm->AllGather(m->streams, send, recv).ok());
  ExpectAllOk(m->SyncAll());
  for (int r = 0; r < ranks(); ++r) {
    std::vector<char> out(recv[r]->NumBytes());
    ASSERT_TRUE(
        recv[r]->buffer->GetTensor(*recv[r], out.data(), 0, out.size()).ok());
    EXPECT_TRUE(out == expected) << "rank " << r;
  }
}

TEST_P(CollectiveTest, BroadcastCopiesTheRoot) {
  auto m = MakeMembers(ranks());
  const Type type = this->type();
  std::vector<Tensor*> t = m->NewTensors(type, {count()});
  std::vector<std::vector<char>> bytes;
  for (int r = 0; r < ranks(); ++r) {
    bytes.push_back(Encode(type, Pattern(type, count(), 30 + r)));
    ASSERT_TRUE(
        t[r]->buffer->SetTensor(*t[r], bytes[r].data(), 0, bytes[r].size())
            .ok());
  }
  const int root = ranks() - 1;
  ASSERT_TRUE(m->comm->Broadcast(m->streams, root, t).ok());
  ExpectAllOk(m->SyncAll());
  for (int r = 0; r < ranks(); ++r) {
    std::vector<char> out(t[r]->NumBytes());
    ASSERT_TRUE(t[r]->buffer->GetTensor(*t[r], out.data(), 0, out.size()).ok());
    EXPECT_TRUE(out == bytes[root]) << "rank " << r;
  }
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  return absl::StrCat(std::get<0>(info.param), "ranks_",
                      std::string(TypeName(std::get<1>(info.param))), "_",
                      std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    All, CollectiveTest,
    testing::Combine(testing::Values(2, 3, 4),
                     testing::Values(Type::kF32, Type::kF16, Type::kBF16),
                     testing::Values(1, 7, 1000003)),
    CaseName);

TEST(HostCommunicatorTest, OneRankIsACopy) {
  auto m = MakeMembers(1);
  std::vector<Tensor*> t = m->NewTensors(Type::kF32, {5});
  const std::vector<float> in = Pattern(Type::kF32, 5, 1);
  ASSERT_TRUE(t[0]->buffer->SetTensor(*t[0], in.data(), 0, 20).ok());
  ASSERT_TRUE(m->comm->AllReduce(m->streams, t).ok());
  ASSERT_TRUE(m->comm->Broadcast(m->streams, 0, t).ok());
  ExpectAllOk(m->SyncAll());
  std::vector<float> out(5);
  ASSERT_TRUE(t[0]->buffer->GetTensor(*t[0], out.data(), 0, 20).ok());
  EXPECT_EQ(out, in);
}

TEST(HostCommunicatorTest, GatherAndScatterInPlace) {
  constexpr int kRanks = 3;
  constexpr int64_t kBlock = 100001;
  auto m = MakeMembers(kRanks);
  std::vector<Tensor*> whole = m->NewTensors(Type::kF32, {kBlock * kRanks});
  std::vector<Tensor*> part;
  std::vector<std::vector<float>> in;
  for (int r = 0; r < kRanks; ++r) {
    in.push_back(Pattern(Type::kF32, kBlock * kRanks, 40 + r));
    ASSERT_TRUE(
        whole[r]
            ->buffer->SetTensor(*whole[r], in[r].data(), 0, in[r].size() * 4)
            .ok());
    // Block r of rank r's whole tensor.
    Tensor* view = m->ctx.NewTensor(Type::kF32, {kBlock}).value();
    view->buffer = whole[r]->buffer;
    view->data = static_cast<char*>(whole[r]->data) + r * kBlock * 4;
    part.push_back(view);
  }
  // Reduce-scatter into the blocks, then gather them back: every rank ends
  // with the all-reduced tensor.
  ASSERT_TRUE(m->comm->ReduceScatter(m->streams, whole, part).ok());
  ASSERT_TRUE(m->comm->AllGather(m->streams, part, whole).ok());
  ExpectAllOk(m->SyncAll());
  for (int r = 0; r < kRanks; ++r) {
    std::vector<float> out(kBlock * kRanks);
    ASSERT_TRUE(
        whole[r]
            ->buffer->GetTensor(*whole[r], out.data(), 0, out.size() * 4)
            .ok());
    ExpectSums(Type::kF32, in, 0, out, absl::StrCat("rank ", r));
  }
}

TEST(HostCommunicatorTest, BackToBackCollectivesRunInOrder) {
  constexpr int kRanks = 3;
  constexpr int64_t kCount = 70001;
  auto m = MakeMembers(kRanks);
  std::vector<Tensor*> t = m->NewTensors(Type::kF32, {kCount});
  std::vector<Tensor*> gathered = m->NewTensors(Type::kF32, {kCount * kRanks});
  std::vector<std::vector<float>> in(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    in[r].assign(kCount, static_cast<float>(r + 1));
    ASSERT_TRUE(
        m->streams[r]->SetTensorAsync(*t[r], in[r].data(), 0, kCount * 4).ok());
  }
  // Ten all-reduces queued without waiting: 6, then 6 * 3^9.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(m->comm->AllReduce(m->streams, t).ok());
  }
  ASSERT_TRUE(m->comm->AllGather(m->streams, t, gathered).ok());
  // Rank 1 changes its tensor; the broadcast from rank 1 carries it.
  const std::vector<float> ones(kCount, 1.0f);
  ASSERT_TRUE(
      m->streams[1]->SetTensorAsync(*t[1], ones.data(), 0, kCount * 4).ok());
  ASSERT_TRUE(m->comm->Broadcast(m->streams, 1, t).ok());
  ASSERT_TRUE(m->comm->AllReduce(m->streams, t).ok());
  std::vector<std::vector<float>> got(kRanks, std::vector<float>(kCount));
  std::vector<std::vector<float>> got_gathered(
      kRanks, std::vector<float>(kCount * kRanks));
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(m->streams[r]
                    ->GetTensorAsync(*t[r], got[r].data(), 0, kCount * 4)
                    .ok());
    ASSERT_TRUE(m->streams[r]
                    ->GetTensorAsync(*gathered[r], got_gathered[r].data(), 0,
                                     kCount * kRanks * 4)
                    .ok());
  }
  ExpectAllOk(m->SyncAll());
  const float after_ten = 6.0f * 19683.0f;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(got[r], std::vector<float>(kCount, 3.0f)) << "rank " << r;
    EXPECT_EQ(got_gathered[r], std::vector<float>(kCount * kRanks, after_ten))
        << "rank " << r;
  }
}

TEST(HostCommunicatorTest, ComputeAfterAllReduceSeesTheSum) {
  constexpr int kRanks = 2;
  constexpr int64_t kCount = 1000;
  auto m = MakeMembers(kRanks);
  std::vector<Tensor*> x = m->NewTensors(Type::kF32, {kCount});
  std::vector<Graph> graphs(kRanks);
  std::vector<Tensor*> doubled;
  std::vector<std::vector<float>> in;
  for (int r = 0; r < kRanks; ++r) {
    Tensor* y = Add(m->ctx, x[r], x[r]).value();
    m->buffers.push_back(
        AllocTensors(m->devices[r]->buffer_type(), {y}).value());
    ASSERT_TRUE(graphs[r].Expand(y).ok());
    doubled.push_back(y);
    in.push_back(Pattern(Type::kF32, kCount, 50 + r));
  }
  // x = in; x += 1 by a graph before the all-reduce (x + x after it).
  std::vector<Tensor*> before;
  std::vector<Graph> before_graphs(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    Tensor* one = m->ctx.NewTensor(Type::kF32, {1}).value();
    Tensor* sum = Add(m->ctx, x[r], one).value();
    m->buffers.push_back(
        AllocTensors(m->devices[r]->buffer_type(), {one, sum}).value());
    const float one_value = 1.0f;
    ASSERT_TRUE(one->buffer->SetTensor(*one, &one_value, 0, 4).ok());
    ASSERT_TRUE(before_graphs[r].Expand(sum).ok());
    before.push_back(sum);
  }
  std::vector<std::vector<float>> out(kRanks, std::vector<float>(kCount));
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(
        m->streams[r]->SetTensorAsync(*x[r], in[r].data(), 0, kCount * 4).ok());
    ASSERT_TRUE(m->streams[r]->ComputeAsync(before_graphs[r]).ok());
  }
  // All-reduce the x + 1 results, then compute 2 * sum on each stream.
  ASSERT_TRUE(m->comm->AllReduce(m->streams, before).ok());
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(m->streams[r]->CopyTensorAsync(*before[r], *x[r]).ok());
    ASSERT_TRUE(m->streams[r]->ComputeAsync(graphs[r]).ok());
    ASSERT_TRUE(m->streams[r]
                    ->GetTensorAsync(*doubled[r], out[r].data(), 0, kCount * 4)
                    .ok());
  }
  ExpectAllOk(m->SyncAll());
  for (int r = 0; r < kRanks; ++r) {
    for (int64_t i = 0; i < kCount; ++i) {
      const float sum = (in[0][i] + 1.0f) + (in[1][i] + 1.0f);
      ASSERT_EQ(out[r][i], 2.0f * sum) << "rank " << r << " element " << i;
    }
  }
}

TEST(HostCommunicatorTest, EarlierFailureOfAMemberFailsEveryRank) {
  constexpr int kRanks = 3;
  auto m = MakeMembers(kRanks);
  std::vector<Tensor*> t = m->NewTensors(Type::kF32, {64});
  // A GET_ROWS on rank 1 that fails when it runs (row 7 of 3).
  Tensor* a = m->ctx.NewTensor(Type::kF32, {4, 3}).value();
  Tensor* rows = m->ctx.NewTensor(Type::kI32, {2}).value();
  Tensor* got = GetRows(m->ctx, a, rows).value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(got).ok());
  m->buffers.push_back(
      AllocTensors(m->devices[1]->buffer_type(), {a, rows, got}).value());
  const int32_t bad_rows[2] = {0, 7};
  ASSERT_TRUE(rows->buffer->SetTensor(*rows, bad_rows, 0, 8).ok());
  std::vector<float> values(64, 1.0f);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(t[r]->buffer->SetTensor(*t[r], values.data(), 0, 256).ok());
  }
  ASSERT_TRUE(m->streams[1]->ComputeAsync(graph).ok());
  ASSERT_TRUE(m->comm->AllReduce(m->streams, t).ok());
  const std::vector<absl::Status> statuses = m->SyncAll();
  const std::string failed = m->devices[1]->name();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(statuses[r].code(), kInvalid) << statuses[r];
    if (r == 1) continue;  // its own kernel error
    EXPECT_NE(statuses[r].message().find(absl::StrCat("rank 1 (", failed, ")")),
              std::string::npos)
        << statuses[r];
    EXPECT_NE(statuses[r].message().find("AllReduce"), std::string::npos)
        << statuses[r];
  }
  // No data moved.
  for (int r = 0; r < kRanks; ++r) {
    std::vector<float> out(64);
    ASSERT_TRUE(t[r]->buffer->GetTensor(*t[r], out.data(), 0, 256).ok());
    EXPECT_EQ(out, values) << "rank " << r;
  }
}

TEST(HostCommunicatorTest, CollectivesOnOtherStreamsStillRunAfterAFailure) {
  constexpr int kRanks = 2;
  auto m = MakeMembers(kRanks);
  std::vector<Tensor*> t = m->NewTensors(Type::kF32, {16});
  // Rank 0's stream fails: its queue waits for an event that failed.
  Tensor* a = m->ctx.NewTensor(Type::kF32, {4, 3}).value();
  Tensor* rows = m->ctx.NewTensor(Type::kI32, {1}).value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(GetRows(m->ctx, a, rows).value()).ok());
  m->buffers.push_back(AllocTensors(m->devices[0]->buffer_type(),
                                    {a, rows, graph.nodes().back()})
                           .value());
  const int32_t bad_row = -1;
  ASSERT_TRUE(rows->buffer->SetTensor(*rows, &bad_row, 0, 4).ok());
  ASSERT_TRUE(m->streams[0]->ComputeAsync(graph).ok());
  ASSERT_TRUE(m->comm->AllReduce(m->streams, t).ok());
  EXPECT_FALSE(m->streams[0]->Synchronize().ok());
  EXPECT_FALSE(m->streams[1]->Synchronize().ok());
  // Fresh streams of the same devices work with the same communicator.
  std::vector<std::unique_ptr<Stream>> fresh;
  std::vector<Stream*> fresh_ptrs;
  for (Device* d : m->devices) {
    fresh.push_back(d->CreateStream().value());
    fresh_ptrs.push_back(fresh.back().get());
  }
  const float two[16] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(t[r]->buffer->SetTensor(*t[r], two, 0, 64).ok());
  }
  ASSERT_TRUE(m->comm->AllReduce(fresh_ptrs, t).ok());
  for (Stream* s : fresh_ptrs) EXPECT_TRUE(s->Synchronize().ok());
  float out[16];
  ASSERT_TRUE(t[1]->buffer->GetTensor(*t[1], out, 0, 64).ok());
  EXPECT_EQ(out[15], 4.0f);
}

TEST(HostCommunicatorTest, ArgumentErrorsQueueNothing) {
  constexpr int kRanks = 2;
  auto m = MakeMembers(kRanks);
  HostCommunicator& comm = *m->comm;
  std::vector<Tensor*> t = m->NewTensors(Type::kF32, {8, 4});
  std::vector<Stream*> s = m->streams;
  auto expect_invalid = [](absl::Status status, absl::string_view needle) {
    EXPECT_EQ(status.code(), kInvalid) << status;
    EXPECT_NE(status.message().find(needle), std::string::npos)
        << status << " lacks " << needle;
  };

  expect_invalid(comm.AllReduce({s[0]}, t), "1 streams for 2 ranks");
  expect_invalid(comm.AllReduce(s, {t[0]}), "1 tensor tensors for 2 ranks");
  expect_invalid(comm.AllReduce({s[1], s[0]}, t), "belongs to device");
  expect_invalid(comm.AllReduce({s[0], nullptr}, t), "is null");
  expect_invalid(comm.AllReduce(s, {t[0], nullptr}), "is null");

  Tensor* unallocated = m->ctx.NewTensor(Type::kF32, {8, 4}).value();
  expect_invalid(comm.AllReduce(s, {t[0], unallocated}), "not allocated");

  Tensor transposed = *t[1];
  std::swap(transposed.ne[0], transposed.ne[1]);
  std::swap(transposed.nb[0], transposed.nb[1]);
  expect_invalid(comm.AllReduce(s, {t[0], &transposed}), "not contiguous");

  std::vector<Tensor*> other_shape = m->NewTensors(Type::kF32, {4, 8});
  expect_invalid(comm.AllReduce(s, {t[0], other_shape[1]}),
                 "differs in type or shape");
  std::vector<Tensor*> ints = m->NewTensors(Type::kI32, {8, 4});
  expect_invalid(comm.AllReduce(s, ints), "not of a reduced type");
  expect_invalid(comm.ReduceScatter(s, ints, ints), "not of a reduced type");
  expect_invalid(comm.AllReduce(s, {t[0], t[0]}), "overlap");

  Tensor outside = *t[1];
  outside.data = static_cast<char*>(t[1]->data) + 64;  // runs past the end
  expect_invalid(comm.AllReduce(s, {t[0], &outside}), "rank 1");

  std::vector<Tensor*> small = m->NewTensors(Type::kF32, {8});
  expect_invalid(comm.AllGather(s, small, t), "bytes, not 2 x 32");
  expect_invalid(comm.AllGather(s, t, small), "bytes, not 2 x 128");
  std::vector<Tensor*> odd = m->NewTensors(Type::kF32, {15});
  expect_invalid(comm.ReduceScatter(s, t, odd), "elements, not 2 x 15");
  std::vector<Tensor*> halves = m->NewTensors(Type::kF16, {16});
  expect_invalid(comm.ReduceScatter(s, t, halves), "recv tensors are f16");
  // A send tensor that overlaps another rank's receive block.
  std::vector<Tensor*> pairs = m->NewTensors(Type::kF32, {16});
  Tensor wrong_block = *small[0];
  wrong_block.buffer = pairs[0]->buffer;
  wrong_block.data = static_cast<char*>(pairs[0]->data) + 32;  // block 1
  expect_invalid(comm.AllGather(s, {&wrong_block, small[1]}, pairs),
                 "other than in place");
  // The in-place form is fine (and leaves the streams fine).
  Tensor right_block = wrong_block;
  right_block.data = pairs[0]->data;  // block 0 of rank 0
  EXPECT_TRUE(comm.AllGather(s, {&right_block, small[1]}, pairs).ok());

  expect_invalid(comm.Broadcast(s, 2, t), "root 2");
  expect_invalid(comm.Broadcast(s, -1, t), "root -1");

  // Nothing was queued: the streams are fine.
  ExpectAllOk(m->SyncAll());
}

TEST(HostCommunicatorTest, CreateRejectsBadMembers) {
  Registry registry;
  ASSERT_TRUE(AddCpuDevices(1, 1, registry).ok());
  Device* cpu = registry.devices()[0];
  EXPECT_EQ(HostCommunicator::Create({}).status().code(), kInvalid);
  EXPECT_EQ(HostCommunicator::Create({cpu, cpu}).status().code(), kInvalid);
  EXPECT_EQ(HostCommunicator::Create({cpu, nullptr}).status().code(), kInvalid);
}

}  // namespace
}  // namespace tessera
