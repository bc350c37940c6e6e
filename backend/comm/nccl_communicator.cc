#include "backend/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "backend/buffer.h"
#include "base/status_macros.h"

namespace tessera {
namespace {

// Invalid arguments and usage leave the communicators usable; every other
// NCCL error is fatal to them.
bool IsFatal(ncclResult_t result) {
  return result != ncclSuccess && result != ncclInvalidArgument &&
         result != ncclInvalidUsage;
}

absl::Status NcclError(ncclResult_t result, absl::string_view where,
                       absl::string_view call) {
  const std::string message =
      absl::StrCat(where, " ", call, ": ", ncclGetErrorString(result));
  switch (result) {
    case ncclSuccess:
      return absl::OkStatus();
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

ncclDataType_t NcclType(Type type) {
  switch (type) {
    case Type::kF16:
      return ncclFloat16;
    case Type::kBF16:
      return ncclBfloat16;
    default:
      return ncclFloat32;
  }
}

// The state of `comms` as ncclCommGetAsyncError reports it: the first
// error, else ncclInProgress while one of them is in progress (a
// non-blocking communicator still initializing or enqueueing), else
// ncclSuccess.
ncclResult_t StateOf(absl::Span<const ncclComm_t> comms) {
  ncclResult_t out = ncclSuccess;
  for (ncclComm_t comm : comms) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t result = ncclCommGetAsyncError(comm, &state);
    if (result == ncclSuccess) result = state;
    if (result == ncclInProgress) {
      out = ncclInProgress;
    } else if (result != ncclSuccess) {
      return result;
    }
  }
  return out;
}

// StateOf(comms), polled every `poll` while it is ncclInProgress and
// `deadline` has not passed; the state last seen.
ncclResult_t Settle(absl::Span<const ncclComm_t> comms, absl::Time deadline,
                    absl::Duration poll) {
  ncclResult_t state = StateOf(comms);
  while (state == ncclInProgress && absl::Now() < deadline) {
    absl::SleepFor(poll);
    state = StateOf(comms);
  }
  return state;
}

}  // namespace

void NcclCommDestroyer::operator()(ncclComm_t comm) const {
  // Nothing to report to at destruction.
  (void)ncclCommDestroy(comm);
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    absl::Span<Device* const> devices, absl::Span<const int> ordinals) {
  constexpr absl::string_view kWhere = "[NcclCommunicator::Create]";
  if (devices.empty() || devices.size() != ordinals.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, " ", devices.size(), " devices and ",
                     ordinals.size(), " ordinals"));
  }
  absl::flat_hash_set<int> seen;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, " device of rank ", i, " is null"));
    }
    if (!seen.insert(ordinals[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWhere, " CUDA ordinal ", ordinals[i], " is a member twice"));
    }
  }
  std::vector<ncclComm_t> raw(devices.size(), nullptr);
  const ncclResult_t result = ncclCommInitAll(
      raw.data(), static_cast<int>(raw.size()), ordinals.data());
  if (result != ncclSuccess) {
    return NcclError(result, kWhere, "ncclCommInitAll");
  }
  std::vector<NcclComm> comms;
  for (ncclComm_t comm : raw) comms.emplace_back(comm);
  const int ranks = static_cast<int>(devices.size());
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(
      std::vector<Device*>(devices.begin(), devices.end()),
      std::vector<int>(ordinals.begin(), ordinals.end()), std::move(comms),
      ranks, /*first_rank=*/0, absl::InfiniteDuration()));
}

absl::StatusOr<std::string> NcclCommunicator::NewGroupId() {
  ncclUniqueId id;
  const ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) {
    return NcclError(result, "[NcclCommunicator::NewGroupId]",
                     "ncclGetUniqueId");
  }
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Join(
    Device* device, int ordinal, absl::string_view id, int ranks, int rank,
    absl::Duration timeout) {
  constexpr absl::string_view kWhere = "[NcclCommunicator::Join]";
  ncclUniqueId unique;
  if (device == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, " null device"));
  }
  if (id.size() != sizeof(unique.internal)) {
    return absl::InvalidArgumentError(absl::StrCat(kWhere, " a group id has ",
                                                   sizeof(unique.internal),
                                                   " bytes, not ", id.size()));
  }
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, " rank ", rank, " of ", ranks));
  }
  std::memcpy(unique.internal, id.data(), id.size());
  // NCCL initializes the rank on the calling thread's device; the thread's
  // own device is given back after.
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  struct RestoreDevice {
    int device;
    ~RestoreDevice() {
      if (device >= 0) (void)cudaSetDevice(device);
    }
  } restore{previous};
  if (const cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat(kWhere, " CUDA device ", ordinal,
                                               ": ", cudaGetErrorString(e)));
  }
  // Non-blocking, so that a group whose other ranks never come is given up.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t raw = nullptr;
  ncclResult_t result =
      ncclCommInitRankConfig(&raw, ranks, unique, rank, &config);
  if (result == ncclSuccess || result == ncclInProgress) {
    result = Settle({raw}, absl::Now() + timeout, absl::Milliseconds(1));
  }
  if (result == ncclInProgress) {
    (void)ncclCommAbort(raw);
    return absl::DeadlineExceededError(
        absl::StrCat(kWhere, " rank ", rank, " of ", ranks,
                     ": the other ranks did not join within ",
                     absl::FormatDuration(timeout)));
  }
  if (result != ncclSuccess) {
    if (raw != nullptr) (void)ncclCommAbort(raw);
    return NcclError(result, kWhere, "ncclCommInitRankConfig");
  }
  std::vector<NcclComm> comms;
  comms.emplace_back(raw);
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(
      {device}, {ordinal}, std::move(comms), ranks, rank, timeout));
}

NcclCommunicator::NcclCommunicator(std::vector<Device*> devices,
                                   std::vector<int> ordinals,
                                   std::vector<NcclComm> comms, int ranks,
                                   int first_rank, absl::Duration settle_limit)
    : devices_(std::move(devices)),
      ordinals_(std::move(ordinals)),
      ranks_(ranks),
      first_rank_(first_rank),
      settle_limit_(settle_limit),
      comms_(std::move(comms)) {}

NcclCommunicator::~NcclCommunicator() = default;

absl::StatusOr<std::vector<NativeCudaStream*>> NcclCommunicator::NativeStreams(
    absl::Span<Stream* const> streams, absl::string_view where) const {
  std::vector<NativeCudaStream*> native;
  for (int i = 0; i < size(); ++i) {
    auto* stream = dynamic_cast<NativeCudaStream*>(streams[i]);
    if (stream == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " stream of rank ", i, " (", devices_[i]->name(),
                       ") does not expose a CUDA stream (NativeCudaStream)"));
    }
    if (stream->cuda_ordinal() != ordinals_[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " stream of rank ", i, " is on CUDA device ",
                       stream->cuda_ordinal(), ", not ", ordinals_[i]));
    }
    native.push_back(stream);
  }
  return native;
}

absl::Status NcclCommunicator::CheckMemory(absl::Span<Tensor* const> tensors,
                                           absl::string_view role,
                                           absl::string_view where) const {
  for (int i = 0; i < size(); ++i) {
    if (&tensors[i]->buffer->type().device() != devices_[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " ", role, " tensor of rank ", i, " (", Describe(*tensors[i]),
          ") is not in memory of device ", devices_[i]->name()));
    }
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Launch(absl::Span<Stream* const> streams,
                                      absl::string_view where, RankOp op) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<NativeCudaStream*> native,
                           NativeStreams(streams, where));
  absl::MutexLock lock(&mu_);
  if (!fatal_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        where,
        " the NCCL communicators were aborted after: ", fatal_.message()));
  }
  auto fail_all = [&native](const absl::Status& status) {
    for (NativeCudaStream* stream : native) stream->Fail(status);
    return status;
  };
  // A member that already failed fails the collective for every rank.
  for (int i = 0; i < size(); ++i) {
    absl::Status member = native[i]->status();
    if (!member.ok()) {
      return fail_all(absl::Status(
          member.code(),
          absl::StrCat(where, " rank ", i, " (", devices_[i]->name(),
                       ") failed before the collective: ", member.message())));
    }
  }
  ncclResult_t result = ncclGroupStart();
  absl::string_view call = "ncclGroupStart";
  if (result == ncclSuccess) {
    for (int i = 0; i < size() && result == ncclSuccess; ++i) {
      result = op(i, native[i]->cuda_stream());
    }
    call = "enqueueing a rank's operation";
    // The group must be closed whatever happened inside it.
    const ncclResult_t end = ncclGroupEnd();
    if (result == ncclSuccess) {
      result = end;
      call = "ncclGroupEnd";
    }
  }
  if (result == ncclInProgress) {
    // A non-blocking communicator (Join) enqueues in the background: the
    // operations are on the streams once no communicator is in progress.
    call = "waiting for NCCL to enqueue";
    result = Settle(RawCommsLocked(), absl::Now() + settle_limit_,
                    absl::Microseconds(20));
    if (result == ncclInProgress) {
      const absl::Status status = absl::DeadlineExceededError(
          absl::StrCat(where, " NCCL did not enqueue the collective within ",
                       absl::FormatDuration(settle_limit_)));
      AbortLocked(status);
      return fail_all(status);
    }
  }
  if (result == ncclSuccess) return absl::OkStatus();
  absl::Status status = NcclError(result, where, call);
  if (IsFatal(result)) AbortLocked(status);
  return fail_all(status);
}

void NcclCommunicator::AbortLocked(const absl::Status& status) {
  fatal_ = status;
  for (NcclComm& comm : comms_) (void)ncclCommAbort(comm.release());
  comms_.clear();
}

absl::Status NcclCommunicator::CheckAsyncError() {
  constexpr absl::string_view kWhere = "[NcclCommunicator::CheckAsyncError]";
  absl::MutexLock lock(&mu_);
  if (!fatal_.ok()) return fatal_;
  const ncclResult_t result = StateOf(RawCommsLocked());
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  absl::Status status = NcclError(result, kWhere, "ncclCommGetAsyncError");
  if (IsFatal(result)) AbortLocked(status);
  return status;
}

std::vector<ncclComm_t> NcclCommunicator::RawCommsLocked() const {
  std::vector<ncclComm_t> raw;
  for (const NcclComm& comm : comms_) raw.push_back(comm.get());
  return raw;
}

absl::Status NcclCommunicator::Await(absl::Span<Stream* const> streams,
                                     absl::Duration timeout) {
  constexpr absl::string_view kWhere = "[NcclCommunicator::Await]";
  if (static_cast<int>(streams.size()) != size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhere, " ", streams.size(), " streams for ", size(), " members"));
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<NativeCudaStream*> native,
                           NativeStreams(streams, kWhere));
  // On an error the communicators are aborted (NCCL's kernels then exit)
  // and the streams drained, so that nothing writes the tensors after this
  // returns, and failed with it.
  auto fail = [&native](const absl::Status& status) {
    for (NativeCudaStream* stream : native) {
      (void)cudaStreamSynchronize(stream->cuda_stream());
      stream->Fail(status);
    }
    return status;
  };
  const absl::Time deadline = absl::Now() + timeout;
  for (NativeCudaStream* stream : native) {
    while (cudaStreamQuery(stream->cuda_stream()) == cudaErrorNotReady) {
      if (absl::Status s = CheckAsyncError(); !s.ok()) return fail(s);
      if (absl::Now() >= deadline) {
        const absl::Status status = absl::DeadlineExceededError(absl::StrCat(
            kWhere, " a collective of rank ", first_rank_, " of ", ranks_,
            " did not finish within ", absl::FormatDuration(timeout),
            " (a rank of the group gone?)"));
        {
          absl::MutexLock lock(&mu_);
          if (fatal_.ok()) AbortLocked(status);
        }
        return fail(status);
      }
      absl::SleepFor(absl::Microseconds(50));
    }
  }
  if (absl::Status s = CheckAsyncError(); !s.ok()) return fail(s);
  return Communicator::Await(streams, timeout);
}

absl::Status NcclCommunicator::AllReduce(absl::Span<Stream* const> streams,
                                         absl::Span<Tensor* const> tensors) {
  constexpr absl::string_view kWhere = "[NcclCommunicator::AllReduce]";
  TESSERA_RETURN_IF_ERROR(CheckAllReduceArgs(*this, streams, tensors, kWhere));
  TESSERA_RETURN_IF_ERROR(CheckMemory(tensors, "tensor", kWhere));
  const size_t count = tensors[0]->NumElements();
  const ncclDataType_t type = NcclType(tensors[0]->type);
  return Launch(streams, kWhere, [&](int i, CUstream_st* stream) {
    return ncclAllReduce(tensors[i]->data, tensors[i]->data, count, type,
                         ncclSum, comms_[i].get(), stream);
  });
}

absl::Status NcclCommunicator::AllGather(absl::Span<Stream* const> streams,
                                         absl::Span<Tensor* const> send,
                                         absl::Span<Tensor* const> recv) {
  constexpr absl::string_view kWhere = "[NcclCommunicator::AllGather]";
  TESSERA_RETURN_IF_ERROR(
      CheckAllGatherArgs(*this, streams, send, recv, kWhere));
  TESSERA_RETURN_IF_ERROR(CheckMemory(send, "send", kWhere));
  TESSERA_RETURN_IF_ERROR(CheckMemory(recv, "recv", kWhere));
  const size_t bytes = send[0]->NumBytes();
  return Launch(streams, kWhere, [&](int i, CUstream_st* stream) {
    return ncclAllGather(send[i]->data, recv[i]->data, bytes, ncclInt8,
                         comms_[i].get(), stream);
  });
}

absl::Status NcclCommunicator::ReduceScatter(absl::Span<Stream* const> streams,
                                             absl::Span<Tensor* const> send,
                                             absl::Span<Tensor* const> recv) {
  constexpr absl::string_view kWhere = "[NcclCommunicator::ReduceScatter]";
  TESSERA_RETURN_IF_ERROR(
      CheckReduceScatterArgs(*this, streams, send, recv, kWhere));
  TESSERA_RETURN_IF_ERROR(CheckMemory(send, "send", kWhere));
  TESSERA_RETURN_IF_ERROR(CheckMemory(recv, "recv", kWhere));
  const size_t count = recv[0]->NumElements();
  const ncclDataType_t type = NcclType(recv[0]->type);
  return Launch(streams, kWhere, [&](int i, CUstream_st* stream) {
    return ncclReduceScatter(send[i]->data, recv[i]->data, count, type, ncclSum,
                             comms_[i].get(), stream);
  });
}

absl::Status NcclCommunicator::Broadcast(absl::Span<Stream* const> streams,
                                         int root,
                                         absl::Span<Tensor* const> tensors) {
  constexpr absl::string_view kWhere = "[NcclCommunicator::Broadcast]";
  TESSERA_RETURN_IF_ERROR(
      CheckBroadcastArgs(*this, streams, root, tensors, kWhere));
  TESSERA_RETURN_IF_ERROR(CheckMemory(tensors, "tensor", kWhere));
  const size_t bytes = tensors[0]->NumBytes();
  return Launch(streams, kWhere, [&](int i, CUstream_st* stream) {
    return ncclBroadcast(tensors[i]->data, tensors[i]->data, bytes, ncclInt8,
                         root, comms_[i].get(), stream);
  });
}

}  // namespace tessera
