#ifndef TESSERA_BACKEND_CPU_CPU_STREAM_H_
#define TESSERA_BACKEND_CPU_CPU_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backend/cpu/thread_pool.h"
#include "backend/stream.h"

namespace tessera {

class CpuDevice;

// A stream of a CPU device: a worker thread runs a FIFO queue of tasks, and
// computes graphs with a ThreadPool of the device's n_threads (the worker
// plus n_threads - 1 helpers). Contract: backend/stream.h. Destruction
// runs what is queued, then joins the threads.
class CpuStream final : public Stream {
 public:
  // Errors: RESOURCE_EXHAUSTED when the threads cannot be started.
  static absl::StatusOr<std::unique_ptr<CpuStream>> Create(CpuDevice& device);
  ~CpuStream() override;
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  Device& device() override;
  absl::Status SetTensorAsync(Tensor& t, const void* data, size_t offset,
                              size_t size) override;
  absl::Status GetTensorAsync(const Tensor& t, void* data, size_t offset,
                              size_t size) override;
  absl::Status CopyTensorAsync(const Tensor& src, Tensor& dst) override;
  absl::Status ComputeAsync(const Graph& graph) override;
  absl::Status Synchronize() override;
  absl::Status RecordEvent(Event& event) override;
  absl::Status WaitEvent(Event& event) override;

 private:
  // A unit of queued work. Work is skipped once the stream has failed;
  // markers (event recordings) always run so that waiters learn the status.
  struct Task {
    absl::AnyInvocable<absl::Status()> run;
    bool is_marker = false;
  };

  CpuStream(CpuDevice& device, std::unique_ptr<ThreadPool> pool);
  void Enqueue(Task task);
  void WorkerLoop();
  // Runs `nodes` on the pool and returns the first error. Nodes worth
  // splitting (CpuIsParallelWorthy) run on the whole team with a barrier
  // before and after; runs of other nodes run on the calling thread alone
  // while the helpers wait at one barrier.
  absl::Status RunGraph(const std::vector<Tensor*>& nodes);

  // Constant after construction.
  CpuDevice& device_;
  // Used only by the worker thread.
  const std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<char[]> work_;  // scratch memory of the kernels
  size_t work_size_ = 0;

  // State below is protected by mu_.
  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;    // tasks ever queued
  uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;  // tasks ever finished
  absl::Status status_ ABSL_GUARDED_BY(mu_);    // sticky: first error
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Started last in Create, joined first in the destructor.
  std::thread worker_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_STREAM_H_
