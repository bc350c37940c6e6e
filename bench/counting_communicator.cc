#include "bench/counting_communicator.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backend/alloc/tensor_allocator.h"
#include "base/status_macros.h"
#include "graph/context.h"

namespace tessera::bench {

std::string Describe(const std::vector<CountingCommunicator::Call>& calls) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < calls.size();) {
    size_t j = i;
    while (j < calls.size() && calls[j].kind == calls[i].kind &&
           calls[j].type == calls[i].type &&
           calls[j].send_elements == calls[i].send_elements) {
      ++j;
    }
    const char* kind = "";
    switch (calls[i].kind) {
      case CountingCommunicator::Kind::kAllReduce:
        kind = "all-reduce";
        break;
      case CountingCommunicator::Kind::kAllGather:
        kind = "all-gather";
        break;
      case CountingCommunicator::Kind::kReduceScatter:
        kind = "reduce-scatter";
        break;
      case CountingCommunicator::Kind::kBroadcast:
        kind = "broadcast";
        break;
    }
    parts.push_back(absl::StrFormat("%d x %s %s[%d]", j - i, kind,
                                    TypeName(calls[i].type),
                                    calls[i].send_elements));
    i = j;
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

absl::StatusOr<double> ReplayMicros(
    Communicator& comm, const std::vector<CountingCommunicator::Call>& calls,
    int repeats) {
  const int n = comm.size();
  std::vector<std::unique_ptr<Stream>> owned;
  std::vector<Stream*> streams;
  for (int r = 0; r < n; ++r) {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s,
                             comm.device(r).CreateStream());
    streams.push_back(s.get());
    owned.push_back(std::move(s));
  }
  Context ctx;
  // Per call, per rank: send and receive tensors.
  std::vector<std::vector<Tensor*>> send(calls.size()), recv(calls.size());
  std::vector<std::vector<Tensor*>> per_rank(n);
  for (size_t i = 0; i < calls.size(); ++i) {
    const CountingCommunicator::Call& c = calls[i];
    for (int r = 0; r < n; ++r) {
      TESSERA_ASSIGN_OR_RETURN(Tensor * s,
                               ctx.NewTensor(c.type, {c.send_elements}));
      per_rank[r].push_back(s);
      send[i].push_back(s);
      Tensor* d = s;
      if (c.recv_elements != c.send_elements) {
        TESSERA_ASSIGN_OR_RETURN(d, ctx.NewTensor(c.type, {c.recv_elements}));
        per_rank[r].push_back(d);
      }
      recv[i].push_back(d);
    }
  }
  std::vector<std::unique_ptr<Buffer>> buffers;
  for (int r = 0; r < n; ++r) {
    if (per_rank[r].empty()) continue;
    TESSERA_ASSIGN_OR_RETURN(
        std::unique_ptr<Buffer> b,
        AllocTensors(comm.device(r).buffer_type(), per_rank[r]));
    TESSERA_RETURN_IF_ERROR(b->Clear(0));
    buffers.push_back(std::move(b));
  }
  auto once = [&]() -> absl::Status {
    for (size_t i = 0; i < calls.size(); ++i) {
      switch (calls[i].kind) {
        case CountingCommunicator::Kind::kAllReduce:
          TESSERA_RETURN_IF_ERROR(comm.AllReduce(streams, send[i]));
          break;
        case CountingCommunicator::Kind::kAllGather:
          TESSERA_RETURN_IF_ERROR(comm.AllGather(streams, send[i], recv[i]));
          break;
        case CountingCommunicator::Kind::kReduceScatter:
          TESSERA_RETURN_IF_ERROR(
              comm.ReduceScatter(streams, send[i], recv[i]));
          break;
        case CountingCommunicator::Kind::kBroadcast:
          TESSERA_RETURN_IF_ERROR(comm.Broadcast(streams, 0, send[i]));
          break;
      }
    }
    for (Stream* s : streams) TESSERA_RETURN_IF_ERROR(s->Synchronize());
    return absl::OkStatus();
  };
  TESSERA_RETURN_IF_ERROR(once());
  std::vector<double> micros;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    TESSERA_RETURN_IF_ERROR(once());
    micros.push_back(1e6 * std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count());
  }
  std::nth_element(micros.begin(), micros.begin() + micros.size() / 2,
                   micros.end());
  return micros[micros.size() / 2];
}

}  // namespace tessera::bench
