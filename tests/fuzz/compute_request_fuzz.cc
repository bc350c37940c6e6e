// Fuzzes one-shot Compute as the daemon runs it: a ComputeRequest (graph,
// inline inputs, outputs) parsed from the bytes goes through decoding,
// validation, scheduling and the CPU kernels, against a session holding one
// 4 KiB buffer (handle 1). Any request must end in a status, never a crash,
// a sanitizer report or a read or write outside the session's memory.
//
// Requests whose tensors are large are skipped before compute so that each
// input runs in microseconds; the decoder's and validator's own limits are
// what the skipped sizes would test, and the graph decoder test covers them.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "proto/tessera.pb.h"
#include "server/operations/config.h"
#include "server/sessions/compute.h"
#include "server/sessions/memory_account.h"
#include "server/sessions/session.h"
#include "tests/fuzz/quiet.h"

namespace {

using tessera::Device;
using tessera::server::Session;

constexpr int64_t kMaxElements = 4096;
constexpr int kMaxTensors = 64;

bool SmallEnough(const tessera::v1::ComputeRequest& request) {
  if (request.graph().tensors_size() > kMaxTensors) return false;
  for (const auto& t : request.graph().tensors()) {
    int64_t n = 1;
    for (int64_t d : t.ne()) {
      if (d < 0 || d > kMaxElements) return false;
      n *= d;
      if (n > kMaxElements) return false;
    }
  }
  return true;
}

struct World {
  World() {
    tessera::fuzz::Quiet();
    tessera::CpuDeviceOptions options;
    options.n_threads = 1;
    cpu = std::make_unique<tessera::CpuDevice>(options);
  }
  std::unique_ptr<tessera::CpuDevice> cpu;
  std::atomic<uint64_t> next_handle{1};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World();
  tessera::v1::ComputeRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size)) ||
      !SmallEnough(request)) {
    return 0;
  }
  Session session("fuzz", "fuzz", world->next_handle,
                  tessera::server::MemoryAccount::Create("the session", 0));
  auto buffer = world->cpu->buffer_type().Alloc(4096);
  if (!buffer.ok()) return 0;
  std::memset((*buffer)->base(), 0, 4096);
  auto handle = session.AddBuffer(*std::move(buffer), {});
  if (!handle.ok()) return 0;
  tessera::server::Limits limits;
  limits.max_graph_nodes = kMaxTensors;
  const std::vector<Device*> devices = {world->cpu.get()};
  tessera::v1::ComputeResponse response;
  (void)tessera::server::RunCompute(session, devices, limits, request,
                                    response);
  session.Close();
  return 0;
}
