#include "bench/ggml_rpc_bench.h"

#include <chrono>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tessera::bench {
namespace {

using testing::Contiguous;
using testing::GgmlRpcClient;
using testing::GgmlTensor;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kOpAdd = 2;

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

// The round trip's requests: GRAPH_RECOMPUTE of graph 0 (on device 0), and
// GET_TENSOR of `result`'s 64 bytes.
struct RecomputeRequests {
  std::vector<uint8_t> recompute = {testing::kGraphRecompute};
  std::vector<uint8_t> get = {testing::kGetTensor};
};

RecomputeRequests RequestsFor(const GgmlTensor& result) {
  RecomputeRequests r;
  testing::Put(r.recompute, 4, 8);
  testing::Put(r.recompute, 0, 4);
  testing::Put(r.get, testing::kGgmlTensorBytes + 16, 8);
  testing::Put(r.get, testing::Encode(result));
  testing::Put(r.get, 0, 8);
  testing::Put(r.get, 64, 8);
  return r;
}

// The reply to GET_TENSOR: its size, then the 64 bytes.
constexpr size_t kReplyBytes = sizeof(uint64_t) + 64;

}  // namespace

RecomputeBytes GgmlRpcRecomputeBytes() {
  const RecomputeRequests r = RequestsFor(GgmlTensor{});
  return {{r.recompute.size(), r.get.size()}, kReplyBytes};
}

absl::StatusOr<std::vector<double>> GgmlRpcRecompute(int port, int n) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<GgmlRpcClient> c,
                           GgmlRpcClient::Connect(port));
  TESSERA_ASSIGN_OR_RETURN(GgmlRpcClient::Allocation a, c->Alloc(0, 4096));
  if (a.remote_ptr == 0) return absl::ResourceExhaustedError("ALLOC_BUFFER");
  const GgmlTensor x = Contiguous(1, kF32, 4, {16}, a.remote_ptr, a.base);
  const GgmlTensor y = Contiguous(2, kF32, 4, {16}, a.remote_ptr, a.base + 64);
  GgmlTensor sum = Contiguous(3, kF32, 4, {16}, a.remote_ptr, a.base + 128);
  sum.op = kOpAdd;
  sum.src[0] = x.id;
  sum.src[1] = y.id;
  const std::vector<float> ones(16, 1.0f), halves(16, 0.5f);
  TESSERA_RETURN_IF_ERROR(c->SetTensor(x, 0, ones.data(), 64));
  TESSERA_RETURN_IF_ERROR(c->SetTensor(y, 0, halves.data(), 64));
  TESSERA_RETURN_IF_ERROR(
      c->Send(testing::kGraphCompute,
              testing::GraphPayload(0, {sum.id}, {x, y, sum})));

  const RecomputeRequests r = RequestsFor(sum);
  float result[16];
  std::vector<double> out;
  const int warmup = n / 10;
  for (int i = 0; i < warmup + n; ++i) {
    const auto start = std::chrono::steady_clock::now();
    TESSERA_RETURN_IF_ERROR(c->SendRaw(r.recompute.data(), r.recompute.size()));
    TESSERA_RETURN_IF_ERROR(c->SendRaw(r.get.data(), r.get.size()));
    TESSERA_RETURN_IF_ERROR(c->ReceiveInto(result, sizeof(result)));
    if (i >= warmup) out.push_back(Since(start));
    if (result[0] != 1.5f) {
      return absl::InternalError(absl::StrCat("wrong result ", result[0]));
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<GgmlRpcTransfer>> GgmlRpcTransfer::Open(
    int port, size_t bytes) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<GgmlRpcClient> c,
                           GgmlRpcClient::Connect(port));
  TESSERA_ASSIGN_OR_RETURN(GgmlRpcClient::Allocation a, c->Alloc(0, bytes));
  if (a.remote_ptr == 0) return absl::ResourceExhaustedError("ALLOC_BUFFER");
  return std::unique_ptr<GgmlRpcTransfer>(
      new GgmlRpcTransfer(std::move(c), a));
}

GgmlTensor GgmlRpcTransfer::At(size_t offset, size_t bytes) const {
  // A byte tensor (I8 is ggml type 24) over the range.
  return Contiguous(1, 24, 1, {static_cast<uint32_t>(bytes)},
                    buffer_.remote_ptr, buffer_.base + offset);
}

absl::StatusOr<double> GgmlRpcTransfer::Upload(const void* data, size_t offset,
                                               size_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  TESSERA_RETURN_IF_ERROR(
      client_->SetTensor(At(offset, bytes), 0, data, bytes));
  TESSERA_RETURN_IF_ERROR(client_->DeviceCount().status());
  return Since(start);
}

absl::StatusOr<double> GgmlRpcTransfer::Download(void* data, size_t offset,
                                                 size_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> req = testing::Encode(At(offset, bytes));
  testing::Put(req, 0, 8);
  testing::Put(req, bytes, 8);
  TESSERA_RETURN_IF_ERROR(client_->Send(testing::kGetTensor, req));
  TESSERA_RETURN_IF_ERROR(client_->ReceiveInto(data, bytes));
  return Since(start);
}

}  // namespace tessera::bench
