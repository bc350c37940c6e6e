#include "server/rpc/tensor_streams.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "proto/chunk_wire.h"
#include "proto/raw_message.h"
#include "proto/value_codec.h"
#include "server/decoding/buffer_range.h"
#include "server/decoding/split_tensor.h"
#include "server/rpc/grpc_status.h"

namespace tessera::server {
namespace {

// Parses a whole message of type M, or INVALID_ARGUMENT naming `what`.
template <typename M>
absl::Status ParseMessage(const grpc::ByteBuffer& raw, absl::string_view what,
                          M& message) {
  if (!wire::ParseRaw(raw, message)) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " a message that does not parse"));
  }
  return absl::OkStatus();
}

class WriteTensorReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  WriteTensorReactor(const TensorStreamContext& context,
                     grpc::ByteBuffer* response)
      : context_(context),
        hold_(context.in_flight.Begin()),
        response_(response) {
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    absl::Status status = ok ? Take() : End();
    if (!ok || !status.ok()) {
      Finish(ToGrpc(status));
      return;
    }
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 private:
  // Handles one message of the stream: a plain chunk goes from the received
  // slices straight into the buffer; anything else is parsed.
  absl::Status Take() {
    TESSERA_ASSIGN_OR_RETURN(
        std::optional<wire::Chunk> chunk,
        wire::FindChunk(message_, wire::kWriteTensorChunkField));
    if (chunk.has_value()) return TakeChunk(*chunk);
    v1::WriteTensorRequest request;
    TESSERA_RETURN_IF_ERROR(ParseMessage(message_, "[WriteTensor]", request));
    if (request.has_header()) return TakeHeader(request.header());
    if (!request.has_chunk()) {
      return absl::InvalidArgumentError(
          "[WriteTensor] a message with neither header nor chunk");
    }
    TESSERA_RETURN_IF_ERROR(CheckChunk(request.chunk().size()));
    TESSERA_RETURN_IF_ERROR(WriteBytes(*range_.buffer, range_.offset, split_,
                                       written_, request.chunk().data(),
                                       request.chunk().size()));
    return Advance(request.chunk().size());
  }

  absl::Status TakeHeader(const v1::WriteTensorRequest::Header& header) {
    if (range_.buffer != nullptr) {
      return absl::InvalidArgumentError(
          "[WriteTensor] a second header in one stream");
    }
    TESSERA_ASSIGN_OR_RETURN(session_,
                             context_.sessions.Find(header.session()));
    TESSERA_ASSIGN_OR_RETURN(
        range_,
        ResolveRange(*session_, "[WriteTensor] dst", header.dst().buffer(),
                     header.dst().offset(), header.size()));
    if (header.has_layout()) {
      absl::StatusOr<Tensor> split = SplitWriteTarget(
          *range_.buffer, range_.offset, range_.size, header.layout());
      if (!split.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("[WriteTensor] ", split.status().message()));
      }
      split_ = *std::move(split);
    }
    if (header.has_hash() && header.size() >= ContentStore::kMinBytes) {
      hash_ = wire::FromProto(header.hash());
    }
    return absl::OkStatus();
  }

  // Host buffers take each received slice directly; other buffers take the
  // chunk in one write from a staging copy, so a device sees one transfer
  // per chunk rather than one per slice.
  absl::Status TakeChunk(const wire::Chunk& chunk) {
    TESSERA_RETURN_IF_ERROR(CheckChunk(chunk.size()));
    Buffer& buffer = *range_.buffer;
    const size_t at = range_.offset + written_;
    if (buffer.type().is_host() && !split_.has_value()) {
      TESSERA_RETURN_IF_ERROR(chunk.ForEachSpan(
          [&](size_t offset, const uint8_t* data, size_t n) {
            return buffer.Write(at + offset, data, n);
          }));
    } else {
      if (staging_.size() < chunk.size()) {
        // At most max_chunk_bytes, charged to the session.
        staging_charge_.Release();
        TESSERA_ASSIGN_OR_RETURN(
            staging_charge_, session_->Reserve(chunk.size(), "WriteTensor"));
        staging_.resize(chunk.size());
      }
      TESSERA_RETURN_IF_ERROR(chunk.ForEachSpan(
          [&](size_t offset, const uint8_t* data, size_t n) {
            std::memcpy(staging_.data() + offset, data, n);
            return absl::OkStatus();
          }));
      TESSERA_RETURN_IF_ERROR(WriteBytes(*range_.buffer, range_.offset,
                                         split_, written_, staging_.data(),
                                         chunk.size()));
    }
    return Advance(chunk.size());
  }

  absl::Status CheckChunk(size_t size) const {
    if (range_.buffer == nullptr) {
      return absl::InvalidArgumentError(
          "[WriteTensor] a chunk before the header");
    }
    if (size > context_.limits.max_chunk_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("[WriteTensor] a chunk of ", size,
                       " bytes exceeds max_chunk_bytes ",
                       context_.limits.max_chunk_bytes));
    }
    if (size > range_.size - written_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[WriteTensor] chunks carry more than the header's ", range_.size,
          " bytes (", written_ + size, " so far)"));
    }
    return absl::OkStatus();
  }

  absl::Status Advance(size_t size) {
    written_ += size;
    context_.metrics.AddReceived(size);
    session_->Touch();
    return absl::OkStatus();
  }

  // An upload that announced its hash, complete: its bytes, read back from
  // the buffer, go to the store when they hash as announced. The copy is
  // charged to the session while it is made; when the session cannot
  // afford it, nothing is kept (the write itself succeeded).
  absl::Status KeepUpload() {
    absl::StatusOr<MemoryCharge> charge =
        session_->Reserve(range_.size, "WriteTensor");
    if (!charge.ok()) return absl::OkStatus();
    auto bytes = std::make_shared<std::string>(range_.size, '\0');
    TESSERA_RETURN_IF_ERROR(
        range_.buffer->Read(range_.offset, bytes->data(), bytes->size()));
    const wire::ContentHash got =
        wire::HashContent(bytes->data(), bytes->size(), /*threads=*/1);
    if (!(got == *hash_)) {
      return absl::DataLossError(absl::StrCat(
          "[WriteTensor] the bytes hash to ", got.Hex(), ", the header said ",
          hash_->Hex(), ": written but not kept"));
    }
    context_.store.Put(*hash_, std::move(bytes));
    return absl::OkStatus();
  }

  // The client closed its side.
  absl::Status End() {
    if (range_.buffer == nullptr) {
      return absl::InvalidArgumentError("[WriteTensor] a stream with no header");
    }
    if (written_ != range_.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("[WriteTensor] the stream ended after ", written_,
                       " of the header's ", range_.size, " bytes"));
    }
    // A split upload's bytes are scattered over the members; there is no
    // whole copy to read back and keep.
    if (hash_.has_value() && !split_.has_value()) {
      TESSERA_RETURN_IF_ERROR(KeepUpload());
    }
    v1::WriteTensorResponse response;
    response.set_bytes_written(written_);
    return wire::SerializeRaw(response, "[WriteTensor]", *response_);
  }

  const TensorStreamContext& context_;
  const InFlight::Hold hold_;
  grpc::ByteBuffer* const response_;
  grpc::ByteBuffer message_;
  std::shared_ptr<Session> session_;
  BufferRange range_;
  // The tensor the bytes are scattered as, for a header with a layout.
  std::optional<Tensor> split_;
  size_t written_ = 0;
  std::string staging_;
  MemoryCharge staging_charge_;
  // The hash of an upload to keep under it.
  std::optional<wire::ContentHash> hash_;
};

class ReadTensorReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  ReadTensorReactor(const TensorStreamContext& context,
                    const grpc::ByteBuffer* request)
      : context_(context), hold_(context.in_flight.Begin()) {
    absl::Status status = Start(context.sessions, *request);
    if (!status.ok()) {
      Finish(ToGrpc(status));
      return;
    }
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {  // the client went away
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "[ReadTensor] the client cancelled"));
      return;
    }
    Next();
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Start(SessionManager& sessions, const grpc::ByteBuffer& raw) {
    v1::ReadTensorRequest request;
    TESSERA_RETURN_IF_ERROR(ParseMessage(raw, "[ReadTensor]", request));
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions.Find(request.session()));
    TESSERA_ASSIGN_OR_RETURN(
        range_, ResolveRange(*session, "[ReadTensor] src",
                             request.src().buffer(), request.src().offset(),
                             request.size()));
    if (request.has_layout()) {
      absl::StatusOr<Tensor> split = SplitReadSource(
          *range_.buffer, range_.offset, range_.size, request.layout());
      if (!split.ok()) {
        return absl::Status(
            split.status().code(),
            absl::StrCat("[ReadTensor] ", split.status().message()));
      }
      split_ = *std::move(split);
    }
    return absl::OkStatus();
  }

  // Sends the next chunk, or finishes after the last. A zero-byte range
  // sends no chunk.
  void Next() {
    if (sent_ == range_.size) {
      Finish(grpc::Status::OK);
      return;
    }
    const size_t n = std::min<size_t>(
        range_.size - sent_,
        wire::StreamChunkBytes(context_.limits.max_chunk_bytes));
    absl::StatusOr<grpc::Slice> data = ChunkAt(range_.offset + sent_, n);
    if (!data.ok()) {
      Finish(ToGrpc(data.status()));
      return;
    }
    sent_ += n;
    context_.metrics.AddSent(n);
    message_ = wire::ChunkMessage(wire::kReadTensorChunkField, *std::move(data));
    StartWrite(&message_);
  }

  // The bytes [at, at + n) of the buffer as a slice that gRPC sends as is.
  // A host buffer's memory is sent in place, the slice keeping the buffer
  // alive until gRPC lets go of it; other buffers are read into a new slice.
  absl::StatusOr<grpc::Slice> ChunkAt(size_t at, size_t n) {
    if (split_.has_value()) {
      // Gathered from the members, a chunk at a time.
      grpc::Slice data(n);
      TESSERA_RETURN_IF_ERROR(range_.buffer->GetTensor(
          *split_, const_cast<uint8_t*>(data.begin()), at - range_.offset, n));
      return data;
    }
    if (range_.buffer->type().is_host()) {
      auto* keep = new std::shared_ptr<Buffer>(range_.buffer);
      return grpc::Slice(
          static_cast<uint8_t*>((*keep)->base()) + at, n,
          [](void* p) { delete static_cast<std::shared_ptr<Buffer>*>(p); },
          keep);
    }
    grpc::Slice data(n);
    TESSERA_RETURN_IF_ERROR(
        range_.buffer->Read(at, const_cast<uint8_t*>(data.begin()), n));
    return data;
  }

  const TensorStreamContext& context_;
  const InFlight::Hold hold_;
  BufferRange range_;
  // The tensor of a read with a layout, gathered from a meta device.
  std::optional<Tensor> split_;
  size_t sent_ = 0;
  grpc::ByteBuffer message_;
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* NewWriteTensorReactor(
    const TensorStreamContext& context, grpc::ByteBuffer* response) {
  return new WriteTensorReactor(context, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* NewReadTensorReactor(
    const TensorStreamContext& context, const grpc::ByteBuffer* request) {
  return new ReadTensorReactor(context, request);
}

}  // namespace tessera::server
