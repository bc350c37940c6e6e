#include "backend/comm/communicator.h"

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/buffer.h"
#include "base/status_macros.h"

namespace tessera {
namespace {

// A checked tensor: where its bytes lie in its buffer.
struct Placed {
  const Tensor* tensor = nullptr;
  size_t offset = 0;
  size_t bytes = 0;
};

absl::Status Invalid(absl::string_view where, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(where, " ", message));
}

absl::Status CheckStreams(const Communicator& comm,
                          absl::Span<Stream* const> streams,
                          absl::string_view where) {
  if (static_cast<int>(streams.size()) != comm.size()) {
    return Invalid(where, absl::StrCat(streams.size(), " streams for ",
                                       comm.size(), " ranks"));
  }
  for (int i = 0; i < comm.size(); ++i) {
    if (streams[i] == nullptr) {
      return Invalid(where, absl::StrCat("stream of rank ", i, " is null"));
    }
    if (&streams[i]->device() != &comm.device(i)) {
      return Invalid(
          where,
          absl::StrCat("stream of rank ", i, " belongs to device ",
                       streams[i]->device().name(), ", not the rank's device ",
                       comm.device(i).name()));
    }
  }
  return absl::OkStatus();
}

// Checks the `role` tensors ("tensor", "send", "recv"), one per rank:
// present, allocated, contiguous, inside their buffers, one type and shape.
absl::StatusOr<std::vector<Placed>> CheckTensors(
    const Communicator& comm, absl::Span<Tensor* const> tensors,
    absl::string_view role, bool reduced, absl::string_view where) {
  if (static_cast<int>(tensors.size()) != comm.size()) {
    return Invalid(where, absl::StrCat(tensors.size(), " ", role,
                                       " tensors for ", comm.size(), " ranks"));
  }
  std::vector<Placed> placed(tensors.size());
  for (int i = 0; i < comm.size(); ++i) {
    const Tensor* t = tensors[i];
    const std::string what = absl::StrCat(role, " tensor of rank ", i);
    if (t == nullptr) return Invalid(where, absl::StrCat(what, " is null"));
    if (!IsValidType(static_cast<int32_t>(t->type))) {
      return Invalid(where, absl::StrCat(what, " has an invalid type"));
    }
    if (t->data == nullptr || t->buffer == nullptr) {
      return Invalid(
          where, absl::StrCat(what, " (", Describe(*t), ") is not allocated"));
    }
    const std::optional<size_t> bytes = CheckedNumBytes(*t);
    if (!bytes.has_value()) {
      return Invalid(where, absl::StrCat(what, " (", Describe(*t),
                                         ") has a corrupt shape"));
    }
    if (!t->IsContiguous()) {
      return Invalid(
          where, absl::StrCat(what, " (", Describe(*t), ") is not contiguous"));
    }
    if (reduced && !IsReducedType(t->type)) {
      return Invalid(where, absl::StrCat(what, " (", Describe(*t),
                                         ") is not of a reduced type "
                                         "(f32, f16, bf16)"));
    }
    absl::StatusOr<size_t> offset = t->buffer->OffsetOf(*t);
    if (!offset.ok()) {
      return Invalid(where,
                     absl::StrCat(what, ": ", offset.status().message()));
    }
    if (i > 0 && (t->type != tensors[0]->type || !SameShape(*t, *tensors[0]))) {
      return Invalid(where,
                     absl::StrCat(what, " (", Describe(*t),
                                  ") differs in type or shape from rank 0's (",
                                  Describe(*tensors[0]), ")"));
    }
    placed[i] = {t, *offset, *bytes};
  }
  return placed;
}

bool Overlap(const Placed& a, const Placed& b) {
  return a.tensor->buffer == b.tensor->buffer && a.bytes > 0 && b.bytes > 0 &&
         a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// No two ranks' tensors share bytes.
absl::Status CheckDisjoint(const std::vector<Placed>& tensors,
                           absl::string_view role, absl::string_view where) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (size_t j = i + 1; j < tensors.size(); ++j) {
      if (Overlap(tensors[i], tensors[j])) {
        return Invalid(where, absl::StrCat(role, " tensors of ranks ", i,
                                           " and ", j, " overlap"));
      }
    }
  }
  return absl::OkStatus();
}

// `small[j]` and `large[i]` share no bytes, except small[i] lying exactly at
// block first_rank + i of large[i] (the in-place form). The roles name them
// in errors.
absl::Status CheckInPlaceOnly(int first_rank, const std::vector<Placed>& small,
                              absl::string_view small_role,
                              const std::vector<Placed>& large,
                              absl::string_view large_role,
                              absl::string_view where) {
  for (size_t i = 0; i < large.size(); ++i) {
    for (size_t j = 0; j < small.size(); ++j) {
      if (!Overlap(large[i], small[j])) continue;
      if (i == j && small[j].offset ==
                        large[i].offset + (first_rank + i) * small[j].bytes) {
        continue;
      }
      return Invalid(
          where, absl::StrCat(small_role, " tensor of rank ", j,
                              " overlaps the ", large_role, " tensor of rank ",
                              i, " other than in place"));
    }
  }
  return absl::OkStatus();
}

// The streams, then the send and the recv tensors of a two-sided
// collective.
absl::StatusOr<std::pair<std::vector<Placed>, std::vector<Placed>>>
CheckSendRecv(const Communicator& comm, absl::Span<Stream* const> streams,
              absl::Span<Tensor* const> send, absl::Span<Tensor* const> recv,
              bool reduced, absl::string_view where) {
  TESSERA_RETURN_IF_ERROR(CheckStreams(comm, streams, where));
  TESSERA_ASSIGN_OR_RETURN(std::vector<Placed> sends,
                           CheckTensors(comm, send, "send", reduced, where));
  TESSERA_ASSIGN_OR_RETURN(std::vector<Placed> recvs,
                           CheckTensors(comm, recv, "recv", reduced, where));
  return std::make_pair(std::move(sends), std::move(recvs));
}

}  // namespace

bool IsReducedType(Type type) {
  return type == Type::kF32 || type == Type::kF16 || type == Type::kBF16;
}

absl::Status CheckAllReduceArgs(const Communicator& comm,
                                absl::Span<Stream* const> streams,
                                absl::Span<Tensor* const> tensors,
                                absl::string_view where) {
  TESSERA_RETURN_IF_ERROR(CheckStreams(comm, streams, where));
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Placed> placed,
      CheckTensors(comm, tensors, "tensor", /*reduced=*/true, where));
  return CheckDisjoint(placed, "tensor", where);
}

absl::Status Communicator::Await(absl::Span<Stream* const> streams,
                                 absl::Duration) {
  absl::Status status;
  for (Stream* stream : streams) status.Update(stream->Synchronize());
  return status;
}

absl::Status CheckAllGatherArgs(const Communicator& comm,
                                absl::Span<Stream* const> streams,
                                absl::Span<Tensor* const> send,
                                absl::Span<Tensor* const> recv,
                                absl::string_view where) {
  TESSERA_ASSIGN_OR_RETURN(
      auto placed,
      CheckSendRecv(comm, streams, send, recv, /*reduced=*/false, where));
  const auto& [sends, recvs] = placed;
  if (recvs[0].bytes != sends[0].bytes * comm.ranks()) {
    return Invalid(where, absl::StrCat("recv tensors have ", recvs[0].bytes,
                                       " bytes, not ", comm.ranks(), " x ",
                                       sends[0].bytes));
  }
  TESSERA_RETURN_IF_ERROR(CheckDisjoint(recvs, "recv", where));
  return CheckInPlaceOnly(comm.first_rank(), sends, "send", recvs, "recv",
                          where);
}

absl::Status CheckReduceScatterArgs(const Communicator& comm,
                                    absl::Span<Stream* const> streams,
                                    absl::Span<Tensor* const> send,
                                    absl::Span<Tensor* const> recv,
                                    absl::string_view where) {
  TESSERA_ASSIGN_OR_RETURN(auto placed, CheckSendRecv(comm, streams, send, recv,
                                                      /*reduced=*/true, where));
  const auto& [sends, recvs] = placed;
  if (recv[0]->type != send[0]->type) {
    return Invalid(
        where,
        absl::StrCat("recv tensors are ", std::string(TypeName(recv[0]->type)),
                     ", send tensors ", std::string(TypeName(send[0]->type))));
  }
  if (send[0]->NumElements() != recv[0]->NumElements() * comm.ranks()) {
    return Invalid(where,
                   absl::StrCat("send tensors have ", send[0]->NumElements(),
                                " elements, not ", comm.ranks(), " x ",
                                recv[0]->NumElements()));
  }
  TESSERA_RETURN_IF_ERROR(CheckDisjoint(recvs, "recv", where));
  return CheckInPlaceOnly(comm.first_rank(), recvs, "recv", sends, "send",
                          where);
}

absl::Status CheckBroadcastArgs(const Communicator& comm,
                                absl::Span<Stream* const> streams, int root,
                                absl::Span<Tensor* const> tensors,
                                absl::string_view where) {
  TESSERA_RETURN_IF_ERROR(CheckStreams(comm, streams, where));
  if (root < 0 || root >= comm.ranks()) {
    return Invalid(
        where, absl::StrCat("root ", root, " is not a rank of ", comm.ranks()));
  }
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Placed> placed,
      CheckTensors(comm, tensors, "tensor", /*reduced=*/false, where));
  return CheckDisjoint(placed, "tensor", where);
}

}  // namespace tessera
