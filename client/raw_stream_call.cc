#include "client/raw_stream_call.h"

#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace tessera::client {
namespace {

// What the caller waits on; shared so that it outlives the reactor, which
// deletes itself when the call is done.
struct CallResult {
  absl::Mutex mu;
  bool done = false;
  grpc::Status status;
  absl::Status handler_status;
};

class RawStreamReactor final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RawStreamReactor(const RawStreamHandlers& handlers,
                   std::shared_ptr<CallResult> result)
      : handlers_(handlers), result_(std::move(result)) {}

  void Start(grpc::Channel& channel, const std::string& method) {
    grpc::GenericStub stub(channel.shared_from_this());
    stub.PrepareBidiStreamingCall(&context_, method, grpc::StubOptions(),
                                  this);
    StartRead(&in_);
    WriteNext();
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (ok) WriteNext();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (absl::Status s = handlers_.on_read(in_); !s.ok()) {
      {
        absl::MutexLock lock(&result_->mu);
        result_->handler_status = s;
      }
      context_.TryCancel();
      return;
    }
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& status) override {
    std::shared_ptr<CallResult> result = result_;
    // Drops the last references to the caller's memory before the caller
    // wakes.
    delete this;
    absl::MutexLock lock(&result->mu);
    result->status = status;
    result->done = true;
  }

 private:
  void WriteNext() {
    std::optional<grpc::ByteBuffer> next = handlers_.next_write();
    if (!next.has_value()) {
      StartWritesDone();
      return;
    }
    out_ = std::move(*next);
    StartWrite(&out_);
  }

  const RawStreamHandlers& handlers_;
  const std::shared_ptr<CallResult> result_;
  grpc::ClientContext context_;
  grpc::ByteBuffer out_;
  grpc::ByteBuffer in_;
};

}  // namespace

absl::Status RunRawStreamCall(grpc::Channel& channel, const std::string& method,
                              const RawStreamHandlers& handlers) {
  auto result = std::make_shared<CallResult>();
  (new RawStreamReactor(handlers, result))->Start(channel, method);
  absl::MutexLock lock(&result->mu);
  result->mu.Await(absl::Condition(&result->done));
  if (!result->handler_status.ok()) return result->handler_status;
  if (result->status.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(result->status.error_code()),
      result->status.error_message());
}

}  // namespace tessera::client
