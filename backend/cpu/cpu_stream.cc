#include "backend/cpu/cpu_stream.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "backend/cpu/cpu_compute.h"
#include "backend/cpu/cpu_device.h"
#include "backend/task_queue.h"
#include "backend/ticket_event.h"
#include "graph/graph.h"

namespace tessera {
namespace {

// The same status with `prefix` in front of its message.
absl::Status Prefixed(const absl::Status& status, std::string_view prefix) {
  return absl::Status(status.code(),
                      absl::StrFormat("%s%s", prefix, status.message()));
}

// Checks, when work is queued, that `t` is allocated in a buffer `device`
// computes on and lies inside it.
absl::Status CheckTensor(const CpuDevice& device, const Tensor& t,
                         std::string_view where) {
  if (t.data == nullptr || t.buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("[%s %s] tensor %s is not allocated", device.name(),
                        where, Describe(t)));
  }
  if (!device.SupportsBufferType(t.buffer->type())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s %s] tensor %s is in a %s buffer, which this device cannot use",
        device.name(), where, Describe(t), t.buffer->type().name()));
  }
  if (absl::StatusOr<size_t> offset = t.buffer->OffsetOf(t); !offset.ok()) {
    return Prefixed(offset.status(),
                    absl::StrFormat("[%s %s] ", device.name(), where));
  }
  return absl::OkStatus();
}

absl::Status CheckTensorRange(const CpuDevice& device, const Tensor& t,
                              const void* data, size_t offset, size_t size,
                              std::string_view where) {
  if (absl::Status s = CheckTensor(device, t, where); !s.ok()) return s;
  const size_t bytes = t.NumBytes();
  if (offset > bytes || size > bytes - offset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s %s] range of %u bytes at offset %u is outside the %u bytes of "
        "tensor %s",
        device.name(), where, size, offset, bytes, Describe(t)));
  }
  if (data == nullptr && size > 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s %s] null host pointer for %u bytes", device.name(), where, size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuStream>> CpuStream::Create(
    CpuDevice& device, TaskQueue::Runner runner) {
  absl::StatusOr<std::unique_ptr<ThreadPool>> pool =
      ThreadPool::Create(device.n_threads(), TaskQueue::kDefaultLinger);
  if (!pool.ok()) {
    return Prefixed(pool.status(), absl::StrFormat("[%s] ", device.name()));
  }
  return std::unique_ptr<CpuStream>(new CpuStream(
      device, std::move(*pool),
      TaskQueue::Create(device.name(), TaskQueue::kDefaultLinger, runner)));
}

CpuStream::CpuStream(CpuDevice& device, std::unique_ptr<ThreadPool> pool,
                     std::unique_ptr<TaskQueue> queue)
    : device_(device), pool_(std::move(pool)), queue_(std::move(queue)) {}

CpuStream::~CpuStream() = default;

Device& CpuStream::device() { return device_; }

absl::Status CpuStream::SetTensorAsync(Tensor& t, const void* data,
                                       size_t offset, size_t size) {
  if (absl::Status s = CheckTensorRange(device_, t, data, offset, size,
                                        "CpuStream::SetTensorAsync");
      !s.ok()) {
    return s;
  }
  queue_->Enqueue([&t, data, offset, size] {
    return t.buffer->SetTensor(t, data, offset, size);
  });
  return absl::OkStatus();
}

absl::Status CpuStream::GetTensorAsync(const Tensor& t, void* data,
                                       size_t offset, size_t size) {
  if (absl::Status s = CheckTensorRange(device_, t, data, offset, size,
                                        "CpuStream::GetTensorAsync");
      !s.ok()) {
    return s;
  }
  queue_->Enqueue([&t, data, offset, size] {
    return t.buffer->GetTensor(t, data, offset, size);
  });
  return absl::OkStatus();
}

absl::Status CpuStream::CopyTensorAsync(const Tensor& src, Tensor& dst) {
  constexpr std::string_view kWhere = "CpuStream::CopyTensorAsync";
  if (absl::Status s = CheckTensor(device_, dst, kWhere); !s.ok()) return s;
  if (src.data == nullptr || src.buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("[%s %s] source %s is not allocated", device_.name(),
                        kWhere, Describe(src)));
  }
  if (!src.buffer->type().is_host()) {
    return absl::UnimplementedError(absl::StrFormat(
        "[%s %s] source %s is in device memory (%s) that the CPU cannot read",
        device_.name(), kWhere, Describe(src), src.buffer->type().name()));
  }
  if (absl::StatusOr<size_t> offset = src.buffer->OffsetOf(src); !offset.ok()) {
    return Prefixed(offset.status(),
                    absl::StrFormat("[%s %s] ", device_.name(), kWhere));
  }
  const size_t bytes = dst.NumBytes();
  if (src.NumBytes() != bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s %s] source %s has %u bytes, destination %s has %u", device_.name(),
        kWhere, Describe(src), src.NumBytes(), Describe(dst), bytes));
  }
  // Both sides are host memory inside their buffers (checked above).
  queue_->Enqueue([&src, &dst, bytes] {
    std::memmove(dst.data, src.data, bytes);
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status CpuStream::ComputeAsync(const Graph& graph) {
  constexpr std::string_view kWhere = "CpuStream::ComputeAsync";
  std::vector<Tensor*> nodes;
  nodes.reserve(graph.nodes().size());
  for (Tensor* node : graph.nodes()) {
    if (node == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "[%s %s] the graph has a null node", device_.name(), kWhere));
    }
    if (absl::Status s = CheckTensor(device_, *node, kWhere); !s.ok()) {
      return s;
    }
    for (const Tensor* src : node->src) {
      if (src == nullptr) continue;
      if (absl::Status s = CheckTensor(device_, *src, kWhere); !s.ok()) {
        return s;
      }
    }
    if (IsViewOp(node->op)) continue;  // views and NONE do no work
    if (!device_.SupportsOp(*node)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "[%s %s] the device does not support node %s (op %d)", device_.name(),
          kWhere, Describe(*node), static_cast<int32_t>(node->op)));
    }
    nodes.push_back(node);
  }
  if (nodes.empty()) return absl::OkStatus();
  queue_->Enqueue(
      [this, nodes = std::move(nodes)] { return RunGraph(nodes); });
  return absl::OkStatus();
}

absl::Status CpuStream::RunGraph(const std::vector<Tensor*>& nodes) {
  // 1. Plan: each node worth splitting is a stage of its own on the whole
  //    team; consecutive other nodes form one stage that thread 0 runs
  //    alone. Scratch memory fits the largest need of any node for the
  //    largest team (a smaller one needs less).
  const int nth = pool_->max_size();
  struct Stage {
    size_t begin;
    size_t end;
    bool parallel;
  };
  std::vector<Stage> stages;
  size_t work = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const bool parallel = nth > 1 && CpuIsParallelWorthy(*nodes[i]);
    work = std::max(
        work, CpuWorkSize(*nodes[i], parallel ? nth : 1, device_.kernels()));
    if (!parallel && !stages.empty() && !stages.back().parallel) {
      stages.back().end = i + 1;
    } else {
      stages.push_back({i, i + 1, parallel});
    }
  }
  constexpr size_t kAlign = 64;
  if (work + kAlign > work_size_) {
    work_.reset(new (std::nothrow) char[work + kAlign]);
    work_size_ = work_ == nullptr ? 0 : work + kAlign;
    if (work_ == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "[%s] cannot allocate %u bytes of kernel scratch memory",
          device_.name(), work));
    }
  }
  char* const scratch = reinterpret_cast<char*>(
      (reinterpret_cast<uintptr_t>(work_.get()) + kAlign - 1) / kAlign *
      kAlign);

  // 2. Run the stages, a barrier after each when the team runs them; after
  //    it, all threads read
  //    the same failed_at and stop at the same stage. failed_at only
  //    decreases, and only nodes of the current or earlier stages fail.
  const CpuKernels* kernels = &device_.kernels();
  absl::Mutex error_mu;
  absl::Status error;
  std::atomic<size_t> failed_at{std::numeric_limits<size_t>::max()};
  auto record = [&](size_t i, absl::Status s) {
    absl::MutexLock lock(&error_mu);
    if (i < failed_at.load(std::memory_order_relaxed)) {
      failed_at.store(i, std::memory_order_relaxed);
      error = std::move(s);
    }
  };
  auto team_barrier = [this] { pool_->Barrier(); };
  auto no_barrier = [] {};
  // A graph without a parallel stage runs on this thread alone: the
  // helpers are not woken at all.
  const bool team = std::any_of(stages.begin(), stages.end(),
                                [](const Stage& s) { return s.parallel; });
  auto run = [&](int ith) {
    // The team the pool could start for this Run (all of it but when a
    // thread could not be started).
    const int team_size = team ? pool_->size() : 1;
    for (const Stage& stage : stages) {
      if (stage.parallel) {
        const CpuComputeContext ctx{.ith = ith,
                                    .nth = team_size,
                                    .kernels = kernels,
                                    .work = scratch,
                                    .barrier = team_barrier};
        absl::Status s = CpuComputeNode(*nodes[stage.begin], ctx);
        if (!s.ok()) record(stage.begin, std::move(s));
      } else if (ith == 0) {
        const CpuComputeContext ctx{.ith = 0,
                                    .nth = 1,
                                    .kernels = kernels,
                                    .work = scratch,
                                    .barrier = no_barrier};
        for (size_t i = stage.begin; i < stage.end; ++i) {
          absl::Status s = CpuComputeNode(*nodes[i], ctx);
          if (!s.ok()) {
            record(i, std::move(s));
            break;
          }
        }
      }
      if (team) pool_->Barrier();
      if (failed_at.load(std::memory_order_relaxed) < stage.end) return;
    }
  };
  if (team) {
    pool_->Run(run);
  } else {
    run(0);
  }
  const size_t failed = failed_at.load(std::memory_order_relaxed);
  if (failed == std::numeric_limits<size_t>::max()) return absl::OkStatus();
  return Prefixed(
      error, absl::StrFormat("[%s] computing node %u (%s): ", device_.name(),
                             failed, Describe(*nodes[failed])));
}

absl::Status CpuStream::Synchronize() { return queue_->Synchronize(); }

absl::Status CpuStream::RecordEvent(Event& event) {
  auto* ticket_event = dynamic_cast<TicketEvent*>(&event);
  if (ticket_event == nullptr || &event.device() != &device_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s CpuStream::RecordEvent] the event belongs to device %s",
        device_.name(), event.device().name()));
  }
  queue_->EnqueueRecord(*ticket_event);
  return absl::OkStatus();
}

absl::Status CpuStream::WaitEvent(Event& event) {
  queue_->EnqueueWait(event);
  return absl::OkStatus();
}

}  // namespace tessera
