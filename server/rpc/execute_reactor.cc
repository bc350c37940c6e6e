#include "server/rpc/execute_reactor.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/value_codec.h"
#include "server/sessions/registered_graph.h"

namespace tessera::server {
namespace {

// How often one execution is submitted again after failing with an earlier
// execution's error (more only when other streams keep failing the graph).
constexpr int kMaxResubmits = 2;
// How long gRPC's callback thread waits for an execution before it hands
// the wait to the work queue.
constexpr absl::Duration kInlineWait = absl::Microseconds(50);
// Executions one message carries at most, either way (tessera.proto).
constexpr size_t kMaxExecutionsPerMessage = 64;
// Responses join one message up to this many bytes in all.
constexpr size_t kBatchBytes = 4 << 20;

class ExecuteReactor final
    : public grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse> {
 public:
  explicit ExecuteReactor(const ExecuteContext& context) : context_(context) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    mu_.Lock();
    if (!ok || stopping_) {
      reads_done_ = true;
      MaybeFinish();
      mu_.Unlock();
      return;
    }
    if (absl::Status s = CheckMessage(request_); !s.ok()) {
      Stop(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        std::string(s.message())));
      mu_.Unlock();
      return;
    }
    response_batch_ = std::clamp<size_t>(request_.max_responses_per_message(),
                                         1, kMaxExecutionsPerMessage);
    if (held_ == 0) busy_.emplace(context_.in_flight.Begin());
    held_ += 1 + request_.more_size();
    google::protobuf::RepeatedPtrField<v1::ExecuteRequest> more;
    more.Swap(request_.mutable_more());
    Queue(std::move(request_));
    request_.Clear();
    for (v1::ExecuteRequest& request : more) Queue(std::move(request));
    const bool may_read = held_ < context_.limits.max_queued_executions;
    read_paused_ = !may_read;
    if (driving_) {
      if (may_read) StartRead(&request_);
      mu_.Unlock();
      return;
    }
    // The next read starts once this request's response is on its way
    // (or the driver hands off): starting a read costs time that would
    // otherwise delay this response.
    read_owed_ = may_read;
    driving_ = true;
    Drive(/*on_callback_thread=*/true);
  }

  void OnWriteDone(bool ok) override {
    // Freed once mu_ is released.
    std::vector<std::unique_ptr<Item>> written;
    v1::ExecuteResponse batch;
    absl::MutexLock lock(&mu_);
    written.swap(writing_);
    batch.Swap(&batch_);
    for (size_t i = 0; i < written.size(); ++i) Unhold();
    if (!ok) {
      Stop(grpc::Status(grpc::StatusCode::CANCELLED,
                        "[Execute] the client went away"));
      return;
    }
    if (read_paused_ && !stopping_) {
      read_paused_ = false;
      StartRead(&request_);
    }
    WriteNext();
    MaybeFinish();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    Stop(grpc::Status(grpc::StatusCode::CANCELLED,
                      "[Execute] the stream was cancelled"));
  }

  // The driver, if one runs, deletes the reactor when it is through: once
  // done_ is set, this thread touches nothing of the reactor's but to
  // delete it when no driver runs.
  void OnDone() override {
    context_.open_streams.fetch_sub(1);
    mu_.Lock();
    done_ = true;
    const bool driving = driving_;
    mu_.Unlock();
    if (!driving) delete this;
  }

 private:
  // One request, from its read until its response is written.
  struct Item {
    ~Item() {
      execution.reset();  // waits: the reads write into `response`
      held.Release();
    }

    v1::ExecuteRequest request;
    int resubmits = 0;
    std::shared_ptr<Session> session;
    std::shared_ptr<RegisteredGraph> graph;
    v1::ExecuteResponse response;
    // The response's bytes, charged to the session until written.
    MemoryCharge held;
    // Why the outputs cannot be sent (the session's quota), if they cannot.
    absl::Status refused;
    std::unique_ptr<RegisteredGraph::Execution> execution;
  };

  enum class Outcome { kOk, kFailed, kAgain };

  // A message's executions: at most kMaxExecutionsPerMessage, and only the
  // first carries others.
  static absl::Status CheckMessage(const v1::ExecuteRequest& request) {
    const size_t count = 1 + request.more_size();
    if (count > kMaxExecutionsPerMessage) {
      return absl::InvalidArgumentError(
          absl::StrCat("[Execute] a message carries ", count,
                       " executions; at most ", kMaxExecutionsPerMessage));
    }
    for (int i = 0; i < request.more_size(); ++i) {
      if (request.more(i).more_size() != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "[Execute] execution ", i + 2,
            " of a message carries executions of its own (more); only the "
            "first may"));
      }
    }
    return absl::OkStatus();
  }

  void Queue(v1::ExecuteRequest request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto item = std::make_unique<Item>();
    item->request = std::move(request);
    queued_.push_back(std::move(item));
  }

  static void SetError(const absl::Status& status, Item& item) {
    item.response.clear_outputs();
    item.held.Release();
    wire::SetStatus(status, item.response);
  }

  // Looks up `item`'s session and graph. Called without mu_ (dropping
  // them may release the last reference to a closed session or graph).
  absl::Status Resolve(Item& item) const {
    absl::StatusOr<std::shared_ptr<Session>> session =
        context_.sessions.Find(item.request.session());
    if (!session.ok()) return session.status();
    absl::StatusOr<std::shared_ptr<RegisteredGraph>> graph =
        (*session)->FindGraph(item.request.graph());
    if (!graph.ok()) return graph.status();
    item.session = *std::move(session);
    item.graph = *std::move(graph);
    return absl::OkStatus();
  }

  // Whether submitting the resolved `item` returns within about
  // kInlineWait: not when its graph's work runs in Submit
  // (RegisteredGraph::Runner::kCaller) and took longer than that the latest
  // time, has not run yet, or runs now for another stream.
  static bool RunsBriefly(const Item& item) {
    return item.graph->caller_run_time() <= kInlineWait &&
           !item.graph->submitting();
  }

  // Submits the resolved `item`.
  absl::Status SubmitRequest(Item& item) {
    const v1::ExecuteRequest& request = item.request;
    const BufferResolver resolve = [s = item.session](uint64_t handle) {
      return s->FindBuffer(handle);
    };
    absl::StatusOr<std::unique_ptr<RegisteredGraph::Execution>> execution =
        item.graph->Submit(request, resolve, item.response);
    if (!execution.ok()) return execution.status();
    item.execution = *std::move(execution);
    absl::StatusOr<MemoryCharge> held =
        item.session->Reserve(item.response.ByteSizeLong(), "Execute");
    if (held.ok()) {
      item.held = *std::move(held);
    } else {
      item.refused = held.status();
    }
    return absl::OkStatus();
  }

  // Submits `item` (again), looking up its session and graph unless
  // `resolved` (the driver just did); an error goes into its response.
  void Submit(Item& item, bool resolved) {
    item.execution.reset();
    item.held.Release();
    item.refused = absl::OkStatus();
    item.response.Clear();
    item.response.set_tag(item.request.tag());
    absl::Status s = resolved ? absl::OkStatus() : Resolve(item);
    if (s.ok()) s = SubmitRequest(item);
    if (!s.ok()) SetError(s, item);
  }

  // Waits for `item`'s execution; kAgain when it must be submitted again.
  Outcome Complete(Item& item) {
    Outcome outcome = Outcome::kOk;
    if (item.execution != nullptr) {
      if (absl::Status s = item.execution->Wait(); !s.ok()) {
        if (item.execution->inherited() && item.resubmits < kMaxResubmits) {
          ++item.resubmits;
          return Outcome::kAgain;
        }
        outcome = Outcome::kFailed;
        SetError(s, item);
      } else if (!item.refused.ok()) {
        SetError(item.refused, item);
      }
      item.execution.reset();
    }
    item.graph.reset();
    item.request.Clear();
    return outcome;
  }

  // Whether the oldest submitted execution is complete (or never started).
  bool OldestDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Item& oldest = *submitted_.front();
    return oldest.execution == nullptr || oldest.execution->IsDone();
  }

  // Waits up to kInlineWait for the execution of `item`; whether it is done.
  bool AwaitBriefly(const Item& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (item.execution == nullptr) return true;
    mu_.Unlock();
    const absl::Time give_up = absl::Now() + kInlineWait;
    bool done = item.execution->IsDone();
    while (!done && absl::Now() < give_up) done = item.execution->IsDone();
    mu_.Lock();
    return done;
  }

  // The driver: submits what is queued, then completes the oldest
  // execution, until there is nothing to do. Called with mu_ held and
  // driving_ set; returns with mu_ released. On the callback thread it hands
  // itself to the work queue instead of waiting for anything. After a failed
  // execution nothing new is submitted until the ones already submitted are
  // complete, so a resubmitted execution runs in its turn.
  void Drive(bool on_callback_thread) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    while (true) {
      if (stopping_) {
        while (!queued_.empty()) {
          queued_.pop_front();
          Unhold();
        }
      }
      const bool may_submit =
          !queued_.empty() && !(recovering_ && !submitted_.empty());
      // Off the callback thread the next is submitted while the oldest runs
      // (so that executions pipeline), but an oldest already done is
      // completed first: where Submit runs the work, its response would
      // otherwise wait for every execution queued behind it.
      if (may_submit &&
          (submitted_.empty() || (!on_callback_thread && !OldestDone()))) {
        std::unique_ptr<Item> item = std::move(queued_.front());
        queued_.pop_front();
        mu_.Unlock();
        bool resolved = false;
        if (on_callback_thread) {
          resolved = Resolve(*item).ok();
          if (resolved && !RunsBriefly(*item)) {
            // Looked up again when submitted, so that a graph released
            // meanwhile is not found then.
            item->session.reset();
            item->graph.reset();
            mu_.Lock();
            queued_.push_front(std::move(item));
            return HandOff();
          }
        }
        Submit(*item, resolved);
        mu_.Lock();
        submitted_.push_back(std::move(item));
        continue;
      }
      // On the callback thread a submission behind one in flight may wait
      // for it: the oldest is completed here first if it is done already.
      if (may_submit && !OldestDone()) return HandOff();
      if (!submitted_.empty()) {
        Item& item = *submitted_.front();
        // A read started while the execution runs costs this response
        // nothing.
        if (on_callback_thread && item.execution != nullptr &&
            !item.execution->IsDone()) {
          StartOwedRead();
        }
        if (on_callback_thread && !AwaitBriefly(item)) return HandOff();
        mu_.Unlock();
        const Outcome outcome = Complete(item);
        if (outcome == Outcome::kAgain) Submit(item, /*resolved=*/false);
        mu_.Lock();
        if (outcome != Outcome::kOk) recovering_ = true;
        if (outcome == Outcome::kAgain) continue;
        std::unique_ptr<Item> done = std::move(submitted_.front());
        submitted_.pop_front();
        if (submitted_.empty()) recovering_ = false;
        if (stopping_) {
          Unhold();
          continue;
        }
        to_write_.push_back(std::move(done));
        // On the callback thread, where each execution is brief, a
        // response waits for those queued behind it, so that the responses
        // of one message go back in one, up to a message's worth.
        if (!on_callback_thread || queued_.empty() ||
            to_write_.size() >= response_batch_) {
          WriteNext();
        }
        StartOwedRead();
        continue;
      }
      WriteNext();
      StartOwedRead();
      driving_ = false;
      const bool gone = done_;
      mu_.Unlock();
      if (gone) delete this;
      return;
    }
  }

  // Continues the driver on the work queue. Called with mu_ held; returns
  // with it released.
  void HandOff() ABSL_UNLOCK_FUNCTION(mu_) {
    WriteNext();
    StartOwedRead();
    const std::string key = WorkKey();
    mu_.Unlock();
    context_.work.Post(key, [this] {
      mu_.Lock();
      Drive(/*on_callback_thread=*/false);
    });
  }

  // The work queue schedules the driver with the calls of the session whose
  // execution it waits for next.
  std::string WorkKey() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!submitted_.empty()) return submitted_.front()->request.session();
    if (!queued_.empty()) return queued_.front()->request.session();
    return "";
  }

  void StartOwedRead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!read_owed_) return;
    read_owed_ = false;
    if (!stopping_) StartRead(&request_);
  }

  // A request's response is written (or dropped).
  void Unhold() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (--held_ == 0) busy_.reset();
  }

  // Starts the next write unless one is in progress: the responses ready,
  // up to response_batch_ of them and kBatchBytes (or one larger response).
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!writing_.empty() || to_write_.empty() || stopping_) return;
    size_t bytes = 0;
    while (!to_write_.empty() && writing_.size() < response_batch_) {
      const size_t size = to_write_.front()->response.ByteSizeLong();
      if (!writing_.empty() && bytes + size > kBatchBytes) break;
      bytes += size;
      writing_.push_back(std::move(to_write_.front()));
      to_write_.pop_front();
    }
    if (writing_.size() == 1) {
      StartWrite(&writing_.front()->response);
      return;
    }
    batch_ = std::move(writing_.front()->response);
    for (size_t i = 1; i < writing_.size(); ++i) {
      *batch_.add_more() = std::move(writing_[i]->response);
    }
    StartWrite(&batch_);
  }

  void MaybeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reads_done_ && held_ == 0) FinishOnce(grpc::Status::OK);
  }

  // Stops taking and writing: nothing of this stream is at work any more.
  void Stop(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    stopping_ = true;
    busy_.reset();
    FinishOnce(std::move(status));
  }

  void FinishOnce(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(status));
  }

  const ExecuteContext context_;
  // Filled by StartRead; handed on in OnReadDone.
  v1::ExecuteRequest request_;

  absl::Mutex mu_;
  // Read, not yet submitted.
  std::deque<std::unique_ptr<Item>> queued_ ABSL_GUARDED_BY(mu_);
  // Submitted, waiting for completion, in order. Only the driver takes
  // items out.
  std::deque<std::unique_ptr<Item>> submitted_ ABSL_GUARDED_BY(mu_);
  // Complete, waiting to be written, in order.
  std::deque<std::unique_ptr<Item>> to_write_ ABSL_GUARDED_BY(mu_);
  // Being written: one response, or several in batch_.
  std::vector<std::unique_ptr<Item>> writing_ ABSL_GUARDED_BY(mu_);
  v1::ExecuteResponse batch_ ABSL_GUARDED_BY(mu_);
  // The most responses one message carries (the client's
  // max_responses_per_message).
  size_t response_batch_ ABSL_GUARDED_BY(mu_) = 1;
  // Requests read whose response is not yet written (or dropped); while
  // there are any the stream counts in context_.in_flight.
  size_t held_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<InFlight::Hold> busy_ ABSL_GUARDED_BY(mu_);
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  // The driver starts the next read (see OnReadDone).
  bool read_owed_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  // A driver runs (on the callback thread or the work queue).
  bool driving_ ABSL_GUARDED_BY(mu_) = false;
  // An execution failed and those submitted after it are not complete yet.
  bool recovering_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // OnDone was called.
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>*
NewExecuteReactor(const ExecuteContext& context) {
  return new ExecuteReactor(context);
}

}  // namespace tessera::server
