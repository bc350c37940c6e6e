#include "sched/testing/timeline_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace tessera {

int Timeline::AddStream() {
  absl::MutexLock lock(&mu_);
  streams_.emplace_back();
  return static_cast<int>(streams_.size()) - 1;
}

int Timeline::Started(int stream) {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_[stream].ended_when_started.size());
}

int Timeline::EndedWhenStarted(int stream, int index, int other) {
  absl::MutexLock lock(&mu_);
  const auto& starts = streams_[stream].ended_when_started;
  if (index < 0 || index >= static_cast<int>(starts.size())) return -1;
  return starts[index][other];
}

void Timeline::AddEnd(int stream, std::shared_ptr<Event> end) {
  absl::MutexLock lock(&mu_);
  streams_[stream].ends.push_back(std::move(end));
}

void Timeline::ObserveStart(int stream, int index) {
  absl::MutexLock lock(&mu_);
  std::vector<int> ended;
  for (PerStream& s : streams_) {
    while (s.ended < static_cast<int>(s.ends.size()) &&
           s.ends[s.ended]->IsDone()) {
      ++s.ended;
    }
    ended.push_back(s.ended);
  }
  auto& starts = streams_[stream].ended_when_started;
  starts.resize(std::max<size_t>(starts.size(), index + 1));
  starts[index] = std::move(ended);
}

absl::StatusOr<std::unique_ptr<TimelineStream>> TimelineStream::Create(
    std::unique_ptr<Stream> inner, Timeline& timeline) {
  if (!inner->device().Props().caps.events) {
    return absl::UnimplementedError(
        absl::StrCat("[TimelineStream] ", inner->device().name(),
                     " has no events to observe"));
  }
  return std::unique_ptr<TimelineStream>(
      new TimelineStream(std::move(inner), timeline));
}

TimelineStream::TimelineStream(std::unique_ptr<Stream> inner,
                               Timeline& timeline)
    : inner_(std::move(inner)),
      timeline_(timeline),
      index_(timeline.AddStream()) {
  watcher_ = std::thread([this] { Watch(); });
}

TimelineStream::~TimelineStream() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  watcher_.join();
}

absl::Status TimelineStream::SetTensorAsync(Tensor& t, const void* data,
                                            size_t offset, size_t size) {
  return inner_->SetTensorAsync(t, data, offset, size);
}

absl::Status TimelineStream::GetTensorAsync(const Tensor& t, void* data,
                                            size_t offset, size_t size) {
  return inner_->GetTensorAsync(t, data, offset, size);
}

absl::Status TimelineStream::CopyTensorAsync(const Tensor& src, Tensor& dst) {
  return inner_->CopyTensorAsync(src, dst);
}

absl::Status TimelineStream::ComputeAsync(const Graph& graph) {
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Event> start,
                           device().CreateEvent());
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Event> end, device().CreateEvent());
  TESSERA_RETURN_IF_ERROR(inner_->RecordEvent(*start));
  TESSERA_RETURN_IF_ERROR(inner_->ComputeAsync(graph));
  TESSERA_RETURN_IF_ERROR(inner_->RecordEvent(*end));
  timeline_.AddEnd(index_, std::move(end));
  absl::MutexLock lock(&mu_);
  starts_.push_back(std::move(start));
  return absl::OkStatus();
}

absl::Status TimelineStream::Synchronize() {
  absl::Status status = inner_->Synchronize();
  absl::MutexLock lock(&mu_);
  auto observed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return starts_.empty() && !watching_;
  };
  mu_.Await(absl::Condition(&observed));
  return status;
}

absl::Status TimelineStream::RecordEvent(Event& event) {
  return inner_->RecordEvent(event);
}

absl::Status TimelineStream::WaitEvent(Event& event) {
  return inner_->WaitEvent(event);
}

void TimelineStream::Watch() {
  for (int index = 0;; ++index) {
    std::shared_ptr<Event> start;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !starts_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (starts_.empty()) return;
      start = std::move(starts_.front());
      starts_.pop_front();
      watching_ = true;
    }
    if (start->Synchronize().ok()) timeline_.ObserveStart(index_, index);
    absl::MutexLock lock(&mu_);
    watching_ = false;
    observed_.push_back(std::move(start));
  }
}

}  // namespace tessera
