#include "tests/fuzz/compute_sandbox.h"

#include <cstring>
#include <vector>

#include "server/operations/config.h"
#include "server/sessions/compute.h"
#include "server/sessions/memory_account.h"
#include "tests/fuzz/quiet.h"

namespace tessera::fuzz {
namespace {

bool Small(const v1::GraphDef& def) {
  if (def.tensors_size() > static_cast<int>(ComputeSandbox::kMaxTensors)) {
    return false;
  }
  for (const auto& t : def.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.ne()) {
      if (d < 0 || d > ComputeSandbox::kMaxElements) return false;
      n *= d;
      if (n > ComputeSandbox::kMaxElements) return false;
    }
  }
  return true;
}

}  // namespace

ComputeSandbox::ComputeSandbox() {
  Quiet();
  CpuDeviceOptions options;
  options.n_threads = 1;
  cpu_ = std::make_unique<CpuDevice>(options);
}

std::unique_ptr<server::Session> ComputeSandbox::NewSession(uint64_t& buffer) {
  auto session = std::make_unique<server::Session>(
      "fuzz", "fuzz", next_handle_,
      server::MemoryAccount::Create("the session", 0));
  std::unique_ptr<Buffer> memory =
      cpu_->buffer_type().Alloc(kBufferBytes).value();
  std::memset(memory->base(), 0, kBufferBytes);
  buffer = session->AddBuffer(std::move(memory), {}).value();
  return session;
}

void ComputeSandbox::Compute(server::Session& session,
                             const v1::ComputeRequest& request) {
  if (Small(request.graph())) {
    server::Limits limits;
    limits.max_graph_nodes = kMaxTensors;
    const std::vector<Device*> devices = {cpu_.get()};
    v1::ComputeResponse response;
    (void)server::RunCompute(session, devices, limits, request, response);
  }
  session.Close();
}

}  // namespace tessera::fuzz
