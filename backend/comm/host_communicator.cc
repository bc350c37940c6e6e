#include "backend/comm/host_communicator.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "backend/buffer.h"
#include "base/status_macros.h"
#include "graph/type.h"

namespace tessera {
namespace {

// Collectives smaller than this per thread run on fewer threads: waking a
// helper costs more than moving the bytes.
constexpr size_t kMinPartBytes = 64 << 10;
// Parts start at multiples of this many bytes (a cache line), so that no
// two threads write one line.
constexpr size_t kPartAlign = 64;
// Values summed at a time in an F32 tile (two tiles stay in L1).
constexpr int64_t kTile = 2048;
// Bytes copied at a time to every destination (stays in L2 while it is
// written to each).
constexpr size_t kCopyTile = 64 << 10;

using Pointers = absl::InlinedVector<char*, 8>;

// Parts to split `bytes` into for `ranks` threads: one per kMinPartBytes,
// at most one per thread, at least one.
int PartsFor(size_t bytes, int ranks) {
  return static_cast<int>(
      std::clamp<size_t>(bytes / kMinPartBytes, 1, static_cast<size_t>(ranks)));
}

// The range [begin, end) of part `part` of `parts` of `total` units, begins
// rounded down to multiples of `align` units.
std::pair<uint64_t, uint64_t> PartRange(uint64_t total, int part, int parts,
                                        uint64_t align) {
  auto start = [&](int p) -> uint64_t {
    if (p >= parts) return total;
    const uint64_t raw = total / parts * p + total % parts * p / parts;
    return raw / align * align;
  };
  return {start(part), start(part + 1)};
}

// acc[j] += the F32 value at src + 4 j, for j < n (src may be unaligned).
void AccumulateF32(const char* src, float* acc, int64_t n) {
  if (n == kTile) {
    for (int64_t j = 0; j < kTile; ++j) {
      float x;
      std::memcpy(&x, src + 4 * j, sizeof(x));
      acc[j] += x;
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    float x;
    std::memcpy(&x, src + 4 * j, sizeof(x));
    acc[j] += x;
  }
}

// dst[i] = sum over r of srcs[r][i] for i < n, for every dst, in `type`
// (accumulated in F32, rounded once). A source may be a destination: each
// tile is read from every source before it is written.
void Reduce(Type type, const Pointers& srcs, const Pointers& dsts, int64_t n) {
  const size_t size = RowSize(type, 1);
  float acc[kTile];
  float tmp[kTile];
  for (int64_t i = 0; i < n; i += kTile) {
    const int64_t len = std::min(kTile, n - i);
    const size_t at = static_cast<size_t>(i) * size;
    RowToFloat(type, srcs[0] + at, acc, len);
    for (size_t r = 1; r < srcs.size(); ++r) {
      if (type == Type::kF32) {
        AccumulateF32(srcs[r] + at, acc, len);
        continue;
      }
      RowToFloat(type, srcs[r] + at, tmp, len);
      for (int64_t j = 0; j < len; ++j) acc[j] += tmp[j];
    }
    for (char* dst : dsts) RowFromFloat(type, acc, dst + at, len);
  }
}

// Copies `bytes` from `src` to every destination, a tile at a time; skips a
// destination that is the source.
void CopyToAll(const char* src, const Pointers& dsts, size_t bytes) {
  for (size_t at = 0; at < bytes; at += kCopyTile) {
    const size_t len = std::min(kCopyTile, bytes - at);
    for (char* dst : dsts) {
      if (dst != src) std::memcpy(dst + at, src + at, len);
    }
  }
}

// The pointers map(0), ..., map(n - 1), or the first error.
template <typename MapFn>
absl::StatusOr<Pointers> MapEach(int n, MapFn map) {
  Pointers data;
  for (int i = 0; i < n; ++i) {
    TESSERA_ASSIGN_OR_RETURN(char* d, map(i));
    data.push_back(d);
  }
  return data;
}

}  // namespace

// One queued call.
struct HostCommunicator::Collective {
  std::string where;  // "[HostCommunicator::AllReduce]"
  // Recorded on rank i's stream at the call (rank order).
  std::vector<std::unique_ptr<Event>> started;
  // The ticket each member stream waits for.
  std::vector<std::pair<TicketEvent*, uint64_t>> done;
  // An error of the member streams while queueing, if any.
  absl::Status status;
  int parts = 1;
  PartFn run;
  // The host copy of a staged tensor (the tensor copied too: only its
  // memory must outlive the call).
  struct Staged {
    int rank;
    Tensor tensor;
    std::unique_ptr<char[]> host;
    bool read;
    bool write;
  };
  std::vector<Staged> staged;
};

absl::StatusOr<std::unique_ptr<HostCommunicator>> HostCommunicator::Create(
    absl::Span<Device* const> devices) {
  constexpr absl::string_view kWhere = "[HostCommunicator::Create]";
  if (devices.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, " no devices"));
  }
  absl::flat_hash_set<Device*> seen;
  for (size_t i = 0; i < devices.size(); ++i) {
    Device* device = devices[i];
    if (device == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, " device of rank ", i, " is null"));
    }
    if (!seen.insert(device).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhere, " device ", device->name(), " is a member twice"));
    }
    if (!device->Props().caps.events) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, " device ", device->name(), " has no events"));
    }
  }
  std::unique_ptr<HostCommunicator> comm(new HostCommunicator(
      std::vector<Device*>(devices.begin(), devices.end())));
  try {
    for (int i = 1; i < comm->size(); ++i) {
      comm->helpers_.emplace_back(&HostCommunicator::HelperLoop, comm.get(), i);
    }
    comm->worker_ = std::thread(&HostCommunicator::WorkerLoop, comm.get());
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(kWhere, " cannot start a thread: ", e.what()));
  }
  return comm;
}

HostCommunicator::HostCommunicator(std::vector<Device*> devices)
    : devices_(std::move(devices)) {}

HostCommunicator::~HostCommunicator() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
  {
    absl::MutexLock lock(&team_mu_);
    team_stopping_ = true;
  }
  for (std::thread& helper : helpers_) helper.join();
}

std::unique_ptr<HostCommunicator::Collective> HostCommunicator::NewCollective(
    absl::string_view where) {
  auto collective = std::make_unique<Collective>();
  collective->where = std::string(where);
  return collective;
}

absl::StatusOr<char*> HostCommunicator::Map(Collective& collective, int rank,
                                            Tensor* t, bool read, bool write) {
  if (t->buffer->type().is_host()) return static_cast<char*>(t->data);
  std::unique_ptr<char[]> host(new (std::nothrow) char[t->NumBytes()]);
  if (host == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        collective.where, " cannot allocate ", t->NumBytes(),
        " bytes to stage the tensor of rank ", rank, " (", Describe(*t), ")"));
  }
  char* data = host.get();
  collective.staged.push_back({rank, *t, std::move(host), read, write});
  return data;
}

absl::Status HostCommunicator::AllReduce(absl::Span<Stream* const> streams,
                                         absl::Span<Tensor* const> tensors) {
  constexpr absl::string_view kWhere = "[HostCommunicator::AllReduce]";
  TESSERA_RETURN_IF_ERROR(CheckAllReduceArgs(*this, streams, tensors, kWhere));
  const Type type = tensors[0]->type;
  const uint64_t count = tensors[0]->NumElements();
  const size_t elem_size = RowSize(type, 1);
  std::unique_ptr<Collective> collective = NewCollective(kWhere);
  TESSERA_ASSIGN_OR_RETURN(Pointers data, MapEach(size(), [&](int i) {
                             return Map(*collective, i, tensors[i], true, true);
                           }));
  return Enqueue(std::move(collective), streams,
                 PartsFor(count * elem_size, size()),
                 [type, count, elem_size, data](int part, int parts) {
                   auto [begin, end] =
                       PartRange(count, part, parts, kPartAlign / elem_size);
                   Pointers at;
                   for (char* d : data) at.push_back(d + begin * elem_size);
                   Reduce(type, at, at, static_cast<int64_t>(end - begin));
                 });
}

absl::Status HostCommunicator::AllGather(absl::Span<Stream* const> streams,
                                         absl::Span<Tensor* const> send,
                                         absl::Span<Tensor* const> recv) {
  constexpr absl::string_view kWhere = "[HostCommunicator::AllGather]";
  TESSERA_RETURN_IF_ERROR(
      CheckAllGatherArgs(*this, streams, send, recv, kWhere));
  const uint64_t block = send[0]->NumBytes();
  const uint64_t total = block * size();
  std::unique_ptr<Collective> collective = NewCollective(kWhere);
  TESSERA_ASSIGN_OR_RETURN(Pointers sends, MapEach(size(), [&](int i) {
                             return Map(*collective, i, send[i], true, false);
                           }));
  TESSERA_ASSIGN_OR_RETURN(Pointers recvs, MapEach(size(), [&](int i) {
                             return Map(*collective, i, recv[i], false, true);
                           }));
  // Part p copies bytes [begin, end) of the concatenation to every rank.
  return Enqueue(std::move(collective), streams, PartsFor(total, size()),
                 [block, total, sends, recvs](int part, int parts) {
                   auto [begin, end] =
                       PartRange(total, part, parts, kPartAlign);
                   while (begin < end) {
                     const uint64_t j = begin / block;
                     const uint64_t offset = begin % block;
                     const uint64_t len = std::min(end - begin, block - offset);
                     Pointers dsts;
                     for (char* r : recvs) dsts.push_back(r + begin);
                     CopyToAll(sends[j] + offset, dsts, len);
                     begin += len;
                   }
                 });
}

absl::Status HostCommunicator::ReduceScatter(absl::Span<Stream* const> streams,
                                             absl::Span<Tensor* const> send,
                                             absl::Span<Tensor* const> recv) {
  constexpr absl::string_view kWhere = "[HostCommunicator::ReduceScatter]";
  TESSERA_RETURN_IF_ERROR(
      CheckReduceScatterArgs(*this, streams, send, recv, kWhere));
  const Type type = send[0]->type;
  const size_t elem_size = RowSize(type, 1);
  const uint64_t block = recv[0]->NumElements();
  const uint64_t total = block * size();
  std::unique_ptr<Collective> collective = NewCollective(kWhere);
  TESSERA_ASSIGN_OR_RETURN(Pointers sends, MapEach(size(), [&](int i) {
                             return Map(*collective, i, send[i], true, false);
                           }));
  TESSERA_ASSIGN_OR_RETURN(Pointers recvs, MapEach(size(), [&](int i) {
                             return Map(*collective, i, recv[i], false, true);
                           }));
  // Part p sums elements [begin, end) of the send tensors (several blocks,
  // or part of one) into the receive tensors they belong to.
  return Enqueue(
      std::move(collective), streams, PartsFor(total * elem_size, size()),
      [type, elem_size, block, total, sends, recvs](int part, int parts) {
        auto [begin, end] =
            PartRange(total, part, parts, kPartAlign / elem_size);
        while (begin < end) {
          const uint64_t i = begin / block;
          const uint64_t offset = begin % block;
          const uint64_t len = std::min(end - begin, block - offset);
          Pointers srcs;
          for (char* s : sends) srcs.push_back(s + begin * elem_size);
          Reduce(type, srcs, {recvs[i] + offset * elem_size},
                 static_cast<int64_t>(len));
          begin += len;
        }
      });
}

absl::Status HostCommunicator::Broadcast(absl::Span<Stream* const> streams,
                                         int root,
                                         absl::Span<Tensor* const> tensors) {
  constexpr absl::string_view kWhere = "[HostCommunicator::Broadcast]";
  TESSERA_RETURN_IF_ERROR(
      CheckBroadcastArgs(*this, streams, root, tensors, kWhere));
  const uint64_t total = tensors[0]->NumBytes();
  std::unique_ptr<Collective> collective = NewCollective(kWhere);
  TESSERA_ASSIGN_OR_RETURN(Pointers data, MapEach(size(), [&](int i) {
                             return Map(*collective, i, tensors[i], i == root,
                                        i != root);
                           }));
  return Enqueue(
      std::move(collective), streams, PartsFor(total * (size() - 1), size()),
      [root, total, data](int part, int parts) {
        auto [begin, end] = PartRange(total, part, parts, kPartAlign);
        Pointers dsts;
        for (char* d : data) dsts.push_back(d + begin);
        CopyToAll(data[root] + begin, dsts, end - begin);
      });
}

absl::Status HostCommunicator::Enqueue(std::unique_ptr<Collective> collective,
                                       absl::Span<Stream* const> streams,
                                       int parts, PartFn run) {
  const std::string where = collective->where;
  collective->parts = parts;
  collective->run = std::move(run);
  // Every event is created before anything is queued, so that a failure
  // here queues nothing.
  for (int i = 0; i < size(); ++i) {
    absl::StatusOr<std::unique_ptr<Event>> event = devices_[i]->CreateEvent();
    if (!event.ok()) {
      return absl::Status(
          event.status().code(),
          absl::StrCat(where, " cannot create an event of ",
                       devices_[i]->name(), ": ", event.status().message()));
    }
    collective->started.push_back(*std::move(event));
  }

  absl::MutexLock call_lock(&call_mu_);
  for (int i = 0; i < size(); ++i) {
    Stream& stream = *streams[i];
    std::unique_ptr<TicketEvent>& done = done_events_[&stream];
    if (done == nullptr) done = std::make_unique<TicketEvent>(stream.device());
    absl::Status status = stream.RecordEvent(*collective->started[i]);
    const uint64_t ticket = done->Record();
    if (status.ok()) status = stream.WaitEvent(*done);
    collective->done.emplace_back(done.get(), ticket);
    if (!status.ok() && collective->status.ok()) {
      // Still queued, so that the streams already waiting learn the error.
      collective->status = absl::Status(
          status.code(),
          absl::StrCat(where, " cannot queue on the stream of rank ", i, " (",
                       devices_[i]->name(), "): ", status.message()));
    }
  }
  absl::Status status = collective->status;
  {
    absl::MutexLock queue_lock(&queue_mu_);
    queue_.push_back(std::move(collective));
  }
  return status;
}

void HostCommunicator::WorkerLoop() {
  while (true) {
    std::unique_ptr<Collective> collective;
    {
      absl::MutexLock lock(&queue_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
        return !queue_.empty() || stopping_;
      };
      queue_mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and everything has run
      collective = std::move(queue_.front());
      queue_.pop_front();
    }
    Run(*collective);
  }
}

void HostCommunicator::Run(Collective& collective) {
  // Step 2: every member's earlier work. All events are waited for, even
  // after a failure, before they are destroyed with the collective.
  absl::Status status = collective.status;
  for (int i = 0; i < size(); ++i) {
    absl::Status member = collective.started[i]->Synchronize();
    if (!member.ok() && status.ok()) {
      status = absl::Status(
          member.code(),
          absl::StrCat(collective.where, " rank ", i, " (", devices_[i]->name(),
                       ") failed before the collective: ", member.message()));
    }
  }
  if (status.ok()) status = Stage(collective, /*in=*/true);
  // Step 4: the worker runs part 0, helpers 1 .. parts - 1.
  if (status.ok()) RunParts(collective.run, collective.parts);
  if (status.ok()) status = Stage(collective, /*in=*/false);
  // Step 6.
  for (auto& [event, ticket] : collective.done) event->Complete(ticket, status);
}

absl::Status HostCommunicator::Stage(Collective& collective, bool in) {
  if (collective.staged.empty()) return absl::OkStatus();
  std::vector<absl::Status> failures(size());
  PartFn stage = [&](int rank, int) {
    for (Collective::Staged& s : collective.staged) {
      if (s.rank != rank || !(in ? s.read : s.write)) continue;
      Tensor& t = s.tensor;
      absl::Status status =
          in ? t.buffer->GetTensor(t, s.host.get(), 0, t.NumBytes())
             : t.buffer->SetTensor(t, s.host.get(), 0, t.NumBytes());
      if (!status.ok()) {
        failures[rank] =
            absl::Status(status.code(),
                         absl::StrCat(collective.where, " cannot ",
                                      in ? "read the tensor of rank "
                                         : "write the tensor of rank ",
                                      rank, " (", devices_[rank]->name(), ", ",
                                      Describe(t), "): ", status.message()));
        return;
      }
    }
  };
  RunParts(stage, size());
  for (const absl::Status& failure : failures) {
    if (!failure.ok()) return failure;
  }
  return absl::OkStatus();
}

void HostCommunicator::RunParts(PartFn& fn, int parts) {
  if (parts > 1) {
    absl::MutexLock lock(&team_mu_);
    team_fn_ = &fn;
    team_parts_ = parts;
    team_pending_ = parts - 1;
    ++team_generation_;
  }
  fn(0, parts);
  if (parts > 1) {
    absl::MutexLock lock(&team_mu_);
    auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(team_mu_) {
      return team_pending_ == 0;
    };
    team_mu_.Await(absl::Condition(&finished));
    team_fn_ = nullptr;
  }
}

void HostCommunicator::HelperLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    PartFn* fn = nullptr;
    int parts = 0;
    {
      absl::MutexLock lock(&team_mu_);
      auto ready = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(team_mu_) {
        return team_generation_ != seen || team_stopping_;
      };
      team_mu_.Await(absl::Condition(&ready));
      if (team_generation_ == seen) return;  // stopping
      seen = team_generation_;
      fn = team_fn_;
      parts = team_parts_;
    }
    if (index >= parts) continue;
    (*fn)(index, parts);
    absl::MutexLock lock(&team_mu_);
    --team_pending_;
  }
}

}  // namespace tessera
