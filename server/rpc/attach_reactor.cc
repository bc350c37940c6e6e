#include "server/rpc/attach_reactor.h"

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/grpc_status.h"

namespace tessera::server {
namespace {

class AttachReactor final : public grpc::ServerWriteReactor<v1::AttachEvent> {
 public:
  AttachReactor(SessionManager& sessions, const v1::AttachRequest* request)
      : sessions_(sessions), id_(request->session()) {
    absl::StatusOr<std::shared_ptr<Session>> session = sessions_.Attach(id_);
    if (!session.ok()) {
      FinishOnce(ToGrpc(session.status()));
      return;
    }
    session_ = *std::move(session);
    attached_ = true;
    session_->SetCloseListener([this] { FinishOnce(grpc::Status::OK); });
  }

  // The client is gone (or the server shuts down): end the session.
  void OnCancel() override {
    if (attached_) sessions_.Detach(id_);
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED,
                            "[Attach] the stream was cancelled"));
  }

  void OnDone() override {
    if (session_ != nullptr) {
      // Waits for a listener call in progress; none can start afterwards.
      session_->SetCloseListener(nullptr);
      if (attached_) sessions_.Detach(id_);
    }
    delete this;
  }

 private:
  void FinishOnce(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  SessionManager& sessions_;
  const std::string id_;
  std::shared_ptr<Session> session_;
  bool attached_ = false;

  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::AttachEvent>* NewAttachReactor(
    SessionManager& sessions, const v1::AttachRequest* request) {
  return new AttachReactor(sessions, request);
}

}  // namespace tessera::server
