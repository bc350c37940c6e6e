#include "server/rpc/attach_reactor.h"

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/grpc_status.h"

namespace tessera::server {
namespace {

class AttachReactor final : public grpc::ServerWriteReactor<v1::AttachEvent> {
 public:
  AttachReactor(SessionManager& sessions, DrainNotice& drain,
                const v1::AttachRequest* request)
      : sessions_(sessions), drain_(drain), id_(request->session()) {
    absl::StatusOr<std::shared_ptr<Session>> session = sessions_.Attach(id_);
    if (!session.ok()) {
      FinishOnce(ToGrpc(session.status()));
      return;
    }
    session_ = *std::move(session);
    attached_ = true;
    session_->SetCloseListener([this] { FinishOnce(grpc::Status::OK); });
    drain_id_ = drain_.Add([this] { SendDraining(); });
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (deferred_finish_.has_value()) Finish(*std::move(deferred_finish_));
  }

  // The client is gone (or the server shuts down): end the session.
  void OnCancel() override {
    if (attached_) sessions_.Detach(id_);
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED,
                            "[Attach] the stream was cancelled"));
  }

  void OnDone() override {
    if (session_ != nullptr) {
      // Each waits for a listener call in progress; none can start
      // afterwards.
      drain_.Remove(drain_id_);
      session_->SetCloseListener(nullptr);
      if (attached_) sessions_.Detach(id_);
    }
    delete this;
  }

 private:
  void SendDraining() {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    event_.set_kind(v1::AttachEvent::DRAINING);
    writing_ = true;
    StartWrite(&event_);
  }

  // Finishes once; after the write in progress, if there is one.
  void FinishOnce(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    if (writing_) {
      deferred_finish_ = std::move(status);
    } else {
      Finish(std::move(status));
    }
  }

  SessionManager& sessions_;
  DrainNotice& drain_;
  const std::string id_;
  std::shared_ptr<Session> session_;
  bool attached_ = false;
  uint64_t drain_id_ = 0;

  absl::Mutex mu_;
  v1::AttachEvent event_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> deferred_finish_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerWriteReactor<v1::AttachEvent>* NewAttachReactor(
    SessionManager& sessions, DrainNotice& drain,
    const v1::AttachRequest* request) {
  return new AttachReactor(sessions, drain, request);
}

}  // namespace tessera::server
