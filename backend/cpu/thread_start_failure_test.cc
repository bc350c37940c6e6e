// Threads that cannot be started are never fatal. Under an address-space
// limit too low for a thread's stack: a TaskQueue's status and recordings
// become RESOURCE_EXHAUSTED naming it, a ThreadPool runs with the calling
// thread alone, and a CPU stream reports the error; once threads can start
// again, the pool has its full team.
//
// A binary of its own: glibc reuses the stacks of joined threads, so the
// limit stops thread starts only in a process that has joined none yet.

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/thread_pool.h"
#include "backend/task_queue.h"
#include "backend/testing/thread_count.h"
#include "backend/ticket_event.h"
#include "base/sanitizers.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

constexpr absl::Duration kLinger = absl::Milliseconds(20);

// The process's address space now (VmSize), in bytes; 0 if unknown.
uint64_t AddressSpaceBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) {
      return std::stoull(line.substr(7)) * 1024;
    }
  }
  return 0;
}

// The stack size of a new thread.
size_t DefaultStackBytes() {
  pthread_attr_t attr;
  size_t bytes = 0;
  if (pthread_getattr_default_np(&attr) != 0) return 0;
  pthread_attr_getstacksize(&attr, &bytes);
  pthread_attr_destroy(&attr);
  return bytes;
}

TEST(ThreadStartFailureTest, IsNeverFatal) {
#ifdef TESSERA_SANITIZED
  GTEST_SKIP() << "sanitizers reserve more address space than any limit";
#endif
  const size_t stack = DefaultStackBytes();
  if (stack < (size_t{1} << 20)) GTEST_SKIP() << "thread stacks too small";

  // Everything the limited part uses exists before it.
  CpuDevice device({.name = "cpu0", .n_threads = 2, .memory_limit = 0});
  Context ctx;
  Tensor* x = ctx.NewTensor(Type::kF32, {16}).value();
  Tensor* y = Add(ctx, x, x).value();
  Graph graph;
  ASSERT_TRUE(graph.Expand(y).ok());
  std::unique_ptr<Buffer> buffer =
      AllocTensors(device.buffer_type(), {x, y}).value();
  std::unique_ptr<Stream> stream = device.CreateStream().value();
  std::unique_ptr<TaskQueue> queue = TaskQueue::Create("queue7", kLinger);
  std::unique_ptr<ThreadPool> pool = ThreadPool::Create(4, kLinger).value();
  TicketEvent event(device);
  const std::vector<float> in(16, 1.0f);
  const int baseline = testing::ThreadCount(getpid());

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
  rlimit lowered = saved;
  // Room for the test's own allocations, not for a stack.
  lowered.rlim_cur = AddressSpaceBytes() + stack / 2;
  ASSERT_GT(lowered.rlim_cur, stack / 2);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < lowered.rlim_cur) {
    GTEST_SKIP() << "the hard address-space limit is already lower";
  }
  ASSERT_EQ(setrlimit(RLIMIT_AS, &lowered), 0);

  // The queue: its task skipped, its recording failed, no thread left.
  bool ran = false;
  queue->Enqueue([&ran] {
    ran = true;
    return absl::OkStatus();
  });
  queue->EnqueueRecord(event);
  const absl::Status queue_status = queue->Synchronize();
  const absl::Status event_status = event.Synchronize();

  // The pool: a team of one.
  std::vector<std::atomic<int>> calls(4);
  std::atomic<int> team{0};
  pool->Run([&](int ith) {
    calls[ith].fetch_add(1);
    team.store(pool->size());
    pool->Barrier();
  });

  // The stream: its work fails with the reason.
  ASSERT_TRUE(stream->SetTensorAsync(*x, in.data(), 0, 64).ok());
  ASSERT_TRUE(stream->ComputeAsync(graph).ok());
  const absl::Status stream_status = stream->Synchronize();
  const int threads = testing::ThreadCount(getpid());
  ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);

  EXPECT_EQ(queue_status.code(), absl::StatusCode::kResourceExhausted)
      << queue_status;
  EXPECT_NE(queue_status.message().find("queue7"), std::string::npos)
      << queue_status;
  EXPECT_FALSE(ran);
  EXPECT_EQ(event_status, queue_status);
  EXPECT_EQ(team.load(), 1);
  EXPECT_EQ(calls[0].load(), 1);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(calls[i].load(), 0) << i;
  EXPECT_EQ(stream_status.code(), absl::StatusCode::kResourceExhausted)
      << stream_status;
  EXPECT_NE(stream_status.message().find("cpu0"), std::string::npos)
      << stream_status;
  EXPECT_EQ(threads, baseline);

  // Threads start again: the pool has its full team.
  for (std::atomic<int>& c : calls) c.store(0);
  pool->Run([&](int ith) {
    calls[ith].fetch_add(1);
    team.store(pool->size());
    pool->Barrier();
  });
  EXPECT_EQ(team.load(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(calls[i].load(), 1) << i;
}

}  // namespace
}  // namespace tessera
