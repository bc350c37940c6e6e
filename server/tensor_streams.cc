#include "server/tensor_streams.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "proto/chunk_wire.h"
#include "server/buffer_range.h"
#include "server/grpc_status.h"

namespace tessera::server {
namespace {

// Parses a whole message of type M, or INVALID_ARGUMENT naming `what`.
template <typename M>
absl::Status ParseMessage(const grpc::ByteBuffer& raw, absl::string_view what,
                          M& message) {
  grpc::ByteBuffer copy = raw;  // references the same slices
  if (!grpc::SerializationTraits<M>::Deserialize(&copy, &message).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " a message that does not parse"));
  }
  return absl::OkStatus();
}

template <typename M>
void SerializeMessage(const M& message, grpc::ByteBuffer& raw) {
  bool own_buffer = false;
  grpc::SerializationTraits<M>::Serialize(message, &raw, &own_buffer).ok();
}

class WriteTensorReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  WriteTensorReactor(SessionManager& sessions, const Limits& limits,
                     grpc::ByteBuffer* response)
      : sessions_(sessions), limits_(limits), response_(response) {
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
    TESSERA_RETURN_IF_ERROR(range_.buffer->Write(
        range_.offset + written_, request.chunk().data(),
        request.chunk().size()));
    return Advance(request.chunk().size());
  }

  absl::Status TakeHeader(const v1::WriteTensorRequest::Header& header) {
    if (range_.buffer != nullptr) {
      return absl::InvalidArgumentError(
          "[WriteTensor] a second header in one stream");
    }
    TESSERA_ASSIGN_OR_RETURN(session_, sessions_.Find(header.session()));
    TESSERA_ASSIGN_OR_RETURN(
        range_,
        ResolveRange(*session_, "[WriteTensor] dst", header.dst().buffer(),
                     header.dst().offset(), header.size()));
    return absl::OkStatus();
  }

  // Host buffers take each received slice directly; other buffers take the
  // chunk in one write from a staging copy, so a device sees one transfer
  // per chunk rather than one per slice.
  absl::Status TakeChunk(const wire::Chunk& chunk) {
    TESSERA_RETURN_IF_ERROR(CheckChunk(chunk.size()));
    Buffer& buffer = *range_.buffer;
    const size_t at = range_.offset + written_;
    if (buffer.type().is_host()) {
      TESSERA_RETURN_IF_ERROR(chunk.ForEachSpan(
          [&](size_t offset, const uint8_t* data, size_t n) {
            return buffer.Write(at + offset, data, n);
          }));
    } else {
      staging_.resize(chunk.size());
      TESSERA_RETURN_IF_ERROR(chunk.ForEachSpan(
          [&](size_t offset, const uint8_t* data, size_t n) {
            std::memcpy(staging_.data() + offset, data, n);
            return absl::OkStatus();
          }));
      TESSERA_RETURN_IF_ERROR(buffer.Write(at, staging_.data(), chunk.size()));
    }
    return Advance(chunk.size());
  }

  absl::Status CheckChunk(size_t size) const {
    if (range_.buffer == nullptr) {
      return absl::InvalidArgumentError(
          "[WriteTensor] a chunk before the header");
    }
    if (size > limits_.max_chunk_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("[WriteTensor] a chunk of ", size,
                       " bytes exceeds max_chunk_bytes ",
                       limits_.max_chunk_bytes));
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
    session_->Touch();
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
    v1::WriteTensorResponse response;
    response.set_bytes_written(written_);
    SerializeMessage(response, *response_);
    return absl::OkStatus();
  }

  SessionManager& sessions_;
  const Limits& limits_;
  grpc::ByteBuffer* const response_;
  grpc::ByteBuffer message_;
  std::shared_ptr<Session> session_;
  BufferRange range_;
  size_t written_ = 0;
  std::string staging_;
};

class ReadTensorReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  ReadTensorReactor(SessionManager& sessions, const Limits& limits,
                    const grpc::ByteBuffer* request)
      : limits_(limits) {
    absl::Status status = Start(sessions, *request);
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
    return absl::OkStatus();
  }

  // Sends the next chunk, read from the buffer into a slice that gRPC sends
  // as is, or finishes after the last. A zero-byte range sends no chunk.
  void Next() {
    if (sent_ == range_.size) {
      Finish(grpc::Status::OK);
      return;
    }
    const size_t n =
        std::min<size_t>(range_.size - sent_, limits_.max_chunk_bytes);
    grpc::Slice data(n);
    absl::Status status = range_.buffer->Read(
        range_.offset + sent_, const_cast<uint8_t*>(data.begin()), n);
    if (!status.ok()) {
      Finish(ToGrpc(status));
      return;
    }
    sent_ += n;
    message_ = wire::ChunkMessage(wire::kReadTensorChunkField, std::move(data));
    StartWrite(&message_);
  }

  const Limits& limits_;
  BufferRange range_;
  size_t sent_ = 0;
  grpc::ByteBuffer message_;
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* NewWriteTensorReactor(
    SessionManager& sessions, const Limits& limits,
    grpc::ByteBuffer* response) {
  return new WriteTensorReactor(sessions, limits, response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* NewReadTensorReactor(
    SessionManager& sessions, const Limits& limits,
    const grpc::ByteBuffer* request) {
  return new ReadTensorReactor(sessions, limits, request);
}

}  // namespace tessera::server
