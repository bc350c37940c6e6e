// Fuzzes one-shot Compute as the daemon runs it: a ComputeRequest (graph,
// inline inputs, outputs) parsed from the bytes goes through decoding,
// validation, scheduling and the CPU kernels, in a session holding one
// 4 KiB buffer. Any request must end in a status, never a crash, a
// sanitizer report or a read or write outside the session's memory.

#include <cstddef>
#include <cstdint>

#include "proto/tessera.pb.h"
#include "tests/fuzz/compute_sandbox.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* sandbox = new tessera::fuzz::ComputeSandbox();
  tessera::v1::ComputeRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  uint64_t buffer = 0;
  auto session = sandbox->NewSession(buffer);
  sandbox->Compute(*session, request);
  return 0;
}
