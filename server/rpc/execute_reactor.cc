#include "server/rpc/execute_reactor.h"

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/value_codec.h"
#include "server/rpc/grpc_status.h"
#include "server/sessions/registered_graph.h"

namespace tessera::server {
namespace {

class ExecuteReactor final
    : public grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse> {
 public:
  ExecuteReactor(SessionManager& sessions, const Limits& limits,
                 InFlight& in_flight)
      : sessions_(sessions), limits_(limits), in_flight_counter_(in_flight) {
    submitter_ = std::thread([this] { SubmitLoop(); });
    completer_ = std::thread([this] { CompleteLoop(); });
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {
        reads_done_ = true;
        MaybeFinish();
        return;
      }
      if (in_flight_++ > 0) {
        queued_.push_back(std::move(request_));
        request_.Clear();
        if (queued_.size() < limits_.max_queued_executions) {
          StartRead(&request_);
        } else {
          read_paused_ = true;
        }
        return;
      }
      busy_.emplace(in_flight_counter_.Begin());
      submitting_here_ = true;
    }
    // Nothing else of this stream is in flight, so the submission waits for
    // none of this stream's work (only another stream executing the same
    // graph can hold its copy slots): submitting on this thread saves the
    // hand-off to the submitter, and the order holds because the next read
    // starts after.
    std::unique_ptr<Item> item = SubmitItem(request_);
    request_.Clear();
    absl::MutexLock lock(&mu_);
    submitted_.push_back(std::move(item));
    submitting_here_ = false;
    if (!stopping_) StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_.reset();
    if (--in_flight_ == 0) busy_.reset();
    if (!ok) {
      stopping_ = true;
      FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED,
                              "[Execute] the client went away"));
      return;
    }
    WriteNext();
    MaybeFinish();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED,
                            "[Execute] the stream was cancelled"));
  }

  // The threads stop; the completer still waits for every execution in
  // flight, whose reads write into responses this reactor owns.
  void OnDone() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    submitter_.join();
    completer_.join();
    delete this;
  }

 private:
  // One execution: its response, and what must live until it is done.
  struct Item {
    std::shared_ptr<RegisteredGraph> graph;
    std::unique_ptr<RegisteredGraph::Execution> execution;
    v1::ExecuteResponse response;
  };

  static void SetError(const absl::Status& status, v1::ExecuteResponse& r) {
    r.clear_outputs();
    wire::SetStatus(status, r);
  }

  absl::Status Submit(const v1::ExecuteRequest& request, Item& item) {
    absl::StatusOr<std::shared_ptr<Session>> session =
        sessions_.Find(request.session());
    if (!session.ok()) return session.status();
    absl::StatusOr<std::shared_ptr<RegisteredGraph>> graph =
        (*session)->FindGraph(request.graph());
    if (!graph.ok()) return graph.status();
    item.graph = *std::move(graph);
    const BufferResolver resolve = [s = *session](uint64_t handle) {
      return s->FindBuffer(handle);
    };
    absl::StatusOr<std::unique_ptr<RegisteredGraph::Execution>> execution =
        item.graph->Submit(request, resolve, item.response);
    if (!execution.ok()) return execution.status();
    item.execution = *std::move(execution);
    return absl::OkStatus();
  }

  // Submits one request; an error goes into its response.
  std::unique_ptr<Item> SubmitItem(const v1::ExecuteRequest& request) {
    auto item = std::make_unique<Item>();
    item->response.set_tag(request.tag());
    if (absl::Status s = Submit(request, *item); !s.ok()) {
      SetError(s, item->response);
    }
    return item;
  }

  void SubmitLoop() {
    while (true) {
      v1::ExecuteRequest request;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](ExecuteReactor* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
              return r->stopping_ || !r->queued_.empty();
            },
            this));
        if (stopping_) {
          submitter_done_ = true;
          return;
        }
        request = std::move(queued_.front());
        queued_.pop_front();
        if (read_paused_) {
          read_paused_ = false;
          StartRead(&request_);
        }
      }
      std::unique_ptr<Item> item = SubmitItem(request);
      absl::MutexLock lock(&mu_);
      submitted_.push_back(std::move(item));
    }
  }

  void CompleteLoop() {
    while (true) {
      std::unique_ptr<Item> item;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](ExecuteReactor* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
              return !r->submitted_.empty() ||
                     (r->stopping_ && r->submitter_done_ &&
                      !r->submitting_here_);
            },
            this));
        if (submitted_.empty()) return;
        item = std::move(submitted_.front());
        submitted_.pop_front();
      }
      if (item->execution != nullptr) {
        if (absl::Status s = item->execution->Wait(); !s.ok()) {
          SetError(s, item->response);
        }
        item->execution.reset();
      }
      item->graph.reset();
      absl::MutexLock lock(&mu_);
      if (stopping_) continue;
      to_write_.push_back(std::move(item));
      WriteNext();
    }
  }

  // Starts the next write unless one is in progress.
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ != nullptr || to_write_.empty() || stopping_) return;
    writing_ = std::move(to_write_.front());
    to_write_.pop_front();
    StartWrite(&writing_->response);
  }

  void MaybeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reads_done_ && in_flight_ == 0) FinishOnce(grpc::Status::OK);
  }

  void FinishOnce(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  SessionManager& sessions_;
  const Limits& limits_;
  InFlight& in_flight_counter_;
  // Filled by StartRead; handed on in OnReadDone.
  v1::ExecuteRequest request_;

  absl::Mutex mu_;
  // Requests read and not yet submitted.
  std::deque<v1::ExecuteRequest> queued_ ABSL_GUARDED_BY(mu_);
  // Submitted, waiting for completion, in order.
  std::deque<std::unique_ptr<Item>> submitted_ ABSL_GUARDED_BY(mu_);
  // Complete, waiting to be written, in order.
  std::deque<std::unique_ptr<Item>> to_write_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Item> writing_ ABSL_GUARDED_BY(mu_);
  // Requests read whose response is not yet written; while there are any
  // the stream counts in in_flight_counter_.
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<InFlight::Hold> busy_ ABSL_GUARDED_BY(mu_);
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool submitter_done_ ABSL_GUARDED_BY(mu_) = false;
  // OnReadDone is submitting a request itself.
  bool submitting_here_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;

  std::thread submitter_;
  std::thread completer_;
};

}  // namespace

grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>*
NewExecuteReactor(SessionManager& sessions, const Limits& limits,
                  InFlight& in_flight) {
  return new ExecuteReactor(sessions, limits, in_flight);
}

}  // namespace tessera::server
