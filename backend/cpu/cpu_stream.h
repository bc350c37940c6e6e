#ifndef TESSERA_BACKEND_CPU_CPU_STREAM_H_
#define TESSERA_BACKEND_CPU_CPU_STREAM_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cpu/thread_pool.h"
#include "backend/stream.h"
#include "backend/task_queue.h"

namespace tessera {

class CpuDevice;

// A stream of a CPU device: a TaskQueue runs its work in order, on its
// worker or, caller-run, on the queuing thread (TaskQueue::Runner), and
// computes graphs with a ThreadPool of up to the device's n_threads (that
// thread plus n_threads - 1 helpers). Its threads run only while it has
// work and a linger after (TaskQueue::kDefaultLinger): an idle stream
// costs no thread. Contract: backend/stream.h. Destruction runs what is
// queued, then joins the threads.
class CpuStream final : public Stream {
 public:
  // Starts no thread. Errors: INVALID_ARGUMENT when the device's n_threads
  // is below 1.
  static absl::StatusOr<std::unique_ptr<CpuStream>> Create(
      CpuDevice& device, TaskQueue::Runner runner);
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
  CpuStream(CpuDevice& device, std::unique_ptr<ThreadPool> pool,
            std::unique_ptr<TaskQueue> queue);
  // Runs `nodes` on the pool and returns the first error. Nodes worth
  // splitting (CpuIsParallelWorthy) run on the whole team (as many threads
  // as the pool could start) with a barrier after each; runs of other
  // nodes run on the calling thread alone while the helpers wait at one
  // barrier.
  absl::Status RunGraph(const std::vector<Tensor*>& nodes);

  CpuDevice& device_;
  // Used only by the thread running the queue's tasks.
  const std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<char[]> work_;  // scratch memory of the kernels
  size_t work_size_ = 0;
  // Destroyed first: it runs what is queued (which uses pool_ and work_),
  // then joins.
  const std::unique_ptr<TaskQueue> queue_;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_STREAM_H_
