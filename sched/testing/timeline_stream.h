#ifndef TESSERA_SCHED_TESTING_TIMELINE_STREAM_H_
#define TESSERA_SCHED_TESTING_TIMELINE_STREAM_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/device.h"
#include "backend/event.h"
#include "backend/stream.h"
#include "graph/graph.h"

namespace tessera {

// The order in which graph computations on several streams started and
// ended, observed through events (not clocks): when computation i of stream
// s starts, the timeline notes how many computations of every stream have
// ended. "Computation i of s started before computation j of t ended" is
// then EndedWhenStarted(s, i, t) <= j. A late observation can only make a
// start look later than it was, never earlier, so an overlap it reports
// happened. Thread-safe.
class Timeline {
 public:
  // Adds a stream; returns its index.
  int AddStream();
  // Computations of `stream` whose start has been observed.
  int Started(int stream);
  // How many computations of `other` had ended when computation `index` of
  // `stream` started (-1 if that start was not observed).
  int EndedWhenStarted(int stream, int index, int other);

 private:
  friend class TimelineStream;
  // Keeps a computation's end marker (queued in order on `stream`).
  void AddEnd(int stream, std::shared_ptr<Event> end);
  // Notes the start of computation `index` of `stream`.
  void ObserveStart(int stream, int index);

  struct PerStream {
    std::vector<std::shared_ptr<Event>> ends;
    int ended = 0;  // leading `ends` known done
    std::vector<std::vector<int>> ended_when_started;
  };
  absl::Mutex mu_;
  std::vector<PerStream> streams_ ABSL_GUARDED_BY(mu_);
};

// A stream that wraps another (whose device, memory and events are used, so
// work runs exactly as it would) and reports to a Timeline when each of its
// ComputeAsync calls starts: it records an event of the device before each
// compute and one after, and a watcher thread observes them in order.
// Contract: backend/stream.h; one thread at a time queues work.
class TimelineStream final : public Stream {
 public:
  // `timeline` must outlive the stream. Errors: UNIMPLEMENTED when the
  // inner stream's device has no events.
  static absl::StatusOr<std::unique_ptr<TimelineStream>> Create(
      std::unique_ptr<Stream> inner, Timeline& timeline);
  ~TimelineStream() override;

  // The inner stream's device.
  Device& device() override { return inner_->device(); }
  absl::Status SetTensorAsync(Tensor& t, const void* data, size_t offset,
                              size_t size) override;
  absl::Status GetTensorAsync(const Tensor& t, void* data, size_t offset,
                              size_t size) override;
  absl::Status CopyTensorAsync(const Tensor& src, Tensor& dst) override;
  absl::Status ComputeAsync(const Graph& graph) override;
  // Waits for the inner stream and for the watcher to observe every start.
  absl::Status Synchronize() override;
  absl::Status RecordEvent(Event& event) override;
  absl::Status WaitEvent(Event& event) override;
  // This stream's index in the timeline.
  int index() const { return index_; }

 private:
  TimelineStream(std::unique_ptr<Stream> inner, Timeline& timeline);
  // Observes each computation's start marker as it completes, in order.
  void Watch();

  const std::unique_ptr<Stream> inner_;
  Timeline& timeline_;
  const int index_;
  absl::Mutex mu_;
  std::deque<std::shared_ptr<Event>> starts_ ABSL_GUARDED_BY(mu_);
  // Observed markers, kept until the stream is gone: the inner stream may
  // still be returning from completing them.
  std::vector<std::shared_ptr<Event>> observed_ ABSL_GUARDED_BY(mu_);
  bool watching_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace tessera

#endif  // TESSERA_SCHED_TESTING_TIMELINE_STREAM_H_
