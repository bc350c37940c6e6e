#include "server/tensor_streams.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/status_macros.h"
#include "server/buffer_range.h"
#include "server/grpc_status.h"

namespace tessera::server {
namespace {

class WriteTensorReactor final
    : public grpc::ServerReadReactor<v1::WriteTensorRequest> {
 public:
  WriteTensorReactor(SessionManager& sessions, const Limits& limits,
                     v1::WriteTensorResponse* response)
      : sessions_(sessions), limits_(limits), response_(response) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    absl::Status status = ok ? Take() : End();
    if (!ok || !status.ok()) {
      Finish(ToGrpc(status));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  // Handles one message of the stream.
  absl::Status Take() {
    if (request_.has_header()) {
      if (range_.buffer != nullptr) {
        return absl::InvalidArgumentError(
            "[WriteTensor] a second header in one stream");
      }
      const v1::WriteTensorRequest::Header& header = request_.header();
      TESSERA_ASSIGN_OR_RETURN(session_, sessions_.Find(header.session()));
      TESSERA_ASSIGN_OR_RETURN(
          range_, ResolveRange(*session_, "[WriteTensor] dst",
                               header.dst().buffer(), header.dst().offset(),
                               header.size()));
      return absl::OkStatus();
    }
    if (!request_.has_chunk()) {
      return absl::InvalidArgumentError(
          "[WriteTensor] a message with neither header nor chunk");
    }
    if (range_.buffer == nullptr) {
      return absl::InvalidArgumentError(
          "[WriteTensor] a chunk before the header");
    }
    const std::string& chunk = request_.chunk();
    if (chunk.size() > limits_.max_chunk_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("[WriteTensor] a chunk of ", chunk.size(),
                       " bytes exceeds max_chunk_bytes ",
                       limits_.max_chunk_bytes));
    }
    if (chunk.size() > range_.size - written_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[WriteTensor] chunks carry more than the header's ", range_.size,
          " bytes (", written_ + chunk.size(), " so far)"));
    }
    TESSERA_RETURN_IF_ERROR(range_.buffer->Write(range_.offset + written_,
                                                 chunk.data(), chunk.size()));
    written_ += chunk.size();
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
    response_->set_bytes_written(written_);
    return absl::OkStatus();
  }

  SessionManager& sessions_;
  const Limits& limits_;
  v1::WriteTensorResponse* const response_;
  v1::WriteTensorRequest request_;
  std::shared_ptr<Session> session_;
  BufferRange range_;
  size_t written_ = 0;
};

class ReadTensorReactor final
    : public grpc::ServerWriteReactor<v1::ReadTensorResponse> {
 public:
  ReadTensorReactor(SessionManager& sessions, const Limits& limits,
                    const v1::ReadTensorRequest* request)
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
  absl::Status Start(SessionManager& sessions,
                     const v1::ReadTensorRequest& request) {
    TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Session> session,
                             sessions.Find(request.session()));
    TESSERA_ASSIGN_OR_RETURN(
        range_, ResolveRange(*session, "[ReadTensor] src",
                             request.src().buffer(), request.src().offset(),
                             request.size()));
    return absl::OkStatus();
  }

  // Sends the next chunk, or finishes after the last. A zero-byte range
  // sends no chunk.
  void Next() {
    if (sent_ == range_.size) {
      Finish(grpc::Status::OK);
      return;
    }
    const size_t n =
        std::min<size_t>(range_.size - sent_, limits_.max_chunk_bytes);
    std::string* chunk = response_.mutable_chunk();
    chunk->resize(n);
    absl::Status status =
        range_.buffer->Read(range_.offset + sent_, chunk->data(), n);
    if (!status.ok()) {
      Finish(ToGrpc(status));
      return;
    }
    sent_ += n;
    StartWrite(&response_);
  }

  const Limits& limits_;
  BufferRange range_;
  size_t sent_ = 0;
  v1::ReadTensorResponse response_;
};

}  // namespace

grpc::ServerReadReactor<v1::WriteTensorRequest>* NewWriteTensorReactor(
    SessionManager& sessions, const Limits& limits,
    v1::WriteTensorResponse* response) {
  return new WriteTensorReactor(sessions, limits, response);
}

grpc::ServerWriteReactor<v1::ReadTensorResponse>* NewReadTensorReactor(
    SessionManager& sessions, const Limits& limits,
    const v1::ReadTensorRequest* request) {
  return new ReadTensorReactor(sessions, limits, request);
}

}  // namespace tessera::server
