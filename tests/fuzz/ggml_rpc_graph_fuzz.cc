// Fuzzes a ggml-rpc GRAPH_COMPUTE payload as tesserad runs it: parsed
// (proto/ggml_rpc/tensor_codec.h: sizes, ids, types, ops, remote pointers
// placed in the connection's buffer), then decoded, validated, scheduled and
// computed on a CPU device like any graph (server/sessions/compute.h). The
// connection holds one 4 KiB buffer, remote pointer kBuffer, whose bytes
// start at remote address kBase. Any payload must end in a status, never a
// crash, a sanitizer report or an access outside that buffer.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "backend/cpu/cpu_device.h"
#include "proto/ggml_rpc/tensor_codec.h"
#include "proto/tessera.pb.h"
#include "server/operations/config.h"
#include "server/sessions/compute.h"
#include "server/sessions/memory_account.h"
#include "server/sessions/session.h"
#include "tests/fuzz/quiet.h"

namespace {

using tessera::Device;
using tessera::server::Session;

constexpr uint64_t kBuffer = 0x1000;
constexpr uint64_t kBase = 0x100000;
constexpr uint64_t kBufferBytes = 4096;
constexpr uint32_t kMaxTensors = 64;
constexpr int64_t kMaxElements = 4096;

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

// Large tensors are skipped before compute so each input runs in
// microseconds; parsing and validation of any size still run.
bool SmallEnough(const tessera::v1::GraphDef& def) {
  for (const auto& t : def.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.ne()) {
      if (d < 0 || d > kMaxElements) return false;
      n *= d;
      if (n > kMaxElements) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World();
  Session session("fuzz", "fuzz", world->next_handle,
                  tessera::server::MemoryAccount::Create("the session", 0));
  auto buffer = world->cpu->buffer_type().Alloc(kBufferBytes);
  if (!buffer.ok()) return 0;
  std::memset((*buffer)->base(), 0, kBufferBytes);
  auto handle = session.AddBuffer(*std::move(buffer), {});
  if (!handle.ok()) return 0;
  const tessera::ggml_rpc::PlaceFn place =
      [&](uint64_t remote_buffer, uint64_t address,
          uint64_t bytes) -> absl::StatusOr<tessera::v1::TensorRef> {
    if (remote_buffer != kBuffer || address < kBase ||
        address - kBase > kBufferBytes ||
        bytes > kBufferBytes - (address - kBase)) {
      return absl::InvalidArgumentError("outside the buffer");
    }
    tessera::v1::TensorRef ref;
    ref.set_buffer(*handle);
    ref.set_offset(address - kBase);
    return ref;
  };
  auto parsed = tessera::ggml_rpc::ParseGraph(absl::MakeConstSpan(data, size),
                                              kMaxTensors, place);
  if (parsed.ok() && SmallEnough(parsed->def)) {
    tessera::v1::ComputeRequest request;
    *request.mutable_graph() = std::move(parsed->def);
    tessera::server::Limits limits;
    limits.max_graph_nodes = kMaxTensors;
    const std::vector<Device*> devices = {world->cpu.get()};
    tessera::v1::ComputeResponse response;
    (void)tessera::server::RunCompute(session, devices, limits, request,
                                      response);
  }
  session.Close();
  return 0;
}
