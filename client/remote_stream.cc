#include "client/remote_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "client/graph_encoder.h"
#include "graph/ops.h"

namespace tessera::client {

absl::StatusOr<std::unique_ptr<RemoteStream>> RemoteStream::Create(
    RemoteDevice& device) {
  return std::unique_ptr<RemoteStream>(
      new RemoteStream(device, TaskQueue::Create(device.name())));
}

absl::Status RemoteStream::CheckRange(const Tensor& t, size_t offset,
                                      size_t size) const {
  auto* remote = dynamic_cast<RemoteBuffer*>(t.buffer);
  if (remote == nullptr || &remote->client() != &device_.client()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", device_.name(), "] tensor '", t.name,
                     "' is not in a buffer of this client's session"));
  }
  if (offset > t.NumBytes() || size > t.NumBytes() - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[", device_.name(), "] range [", offset, ", ", offset + size,
        ") is outside tensor '", t.name, "' of ", t.NumBytes(), " bytes"));
  }
  return remote->OffsetOf(t).status();
}

absl::Status RemoteStream::SetTensorAsync(Tensor& t, const void* data,
                                          size_t offset, size_t size) {
  TESSERA_RETURN_IF_ERROR(CheckRange(t, offset, size));
  queue_->Enqueue([&t, data, offset, size] {
    return t.buffer->SetTensor(t, data, offset, size);
  });
  return absl::OkStatus();
}

absl::Status RemoteStream::GetTensorAsync(const Tensor& t, void* data,
                                          size_t offset, size_t size) {
  TESSERA_RETURN_IF_ERROR(CheckRange(t, offset, size));
  queue_->Enqueue([&t, data, offset, size] {
    return t.buffer->GetTensor(t, data, offset, size);
  });
  return absl::OkStatus();
}

absl::Status RemoteStream::CopyTensorAsync(const Tensor& src, Tensor& dst) {
  if (src.NumBytes() != dst.NumBytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[", device_.name(), "] copy of '", src.name, "' (", src.NumBytes(),
        " bytes) into '", dst.name, "' (", dst.NumBytes(), " bytes)"));
  }
  if (!CheckRange(src, 0, 0).ok() || !CheckRange(dst, 0, 0).ok()) {
    return absl::UnimplementedError(
        absl::StrCat("[", device_.name(), "] cannot reach '", src.name,
                     "' to copy it into '", dst.name, "'"));
  }
  queue_->Enqueue([&src, &dst]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(bool copied, dst.buffer->CopyFrom(src, dst));
    if (!copied) return absl::InternalError("remote copy refused");
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status RemoteStream::ComputeAsync(const Graph& graph) {
  for (const Tensor* node : graph.nodes()) {
    if (absl::Status s = ValidateNode(*node); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[", device_.name(), "] node '", node->name, "' (",
          std::string(OpName(node->op)), ") is not supported: ", s.message()));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(EncodedGraph encoded,
                           EncodeGraph(graph, device_.client(),
                                       /*require_data=*/true));
  auto request = std::make_shared<v1::ComputeRequest>();
  *request->mutable_graph() = std::move(encoded.def);
  queue_->Enqueue([this, request]() -> absl::Status {
    v1::ComputeResponse response;
    return device_.client().Compute(*request, response);
  });
  return absl::OkStatus();
}

void RemoteStream::CollectiveAsync(v1::RunCollectiveRequest request) {
  queue_->Enqueue([this, request = std::move(request)]() mutable {
    return device_.client().RunCollective(request);
  });
}

absl::Status RemoteStream::RecordEvent(Event& event) {
  auto* ticket_event = dynamic_cast<TicketEvent*>(&event);
  if (ticket_event == nullptr || &event.device() != &device_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[", device_.name(), "] RecordEvent: the event belongs to ",
        event.device().name()));
  }
  queue_->EnqueueRecord(*ticket_event);
  return absl::OkStatus();
}

absl::Status RemoteStream::WaitEvent(Event& event) {
  queue_->EnqueueWait(event);
  return absl::OkStatus();
}

}  // namespace tessera::client
