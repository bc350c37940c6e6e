// Fuzzes a ggml-rpc GRAPH_COMPUTE payload as tesserad runs it: parsed
// (proto/ggml_rpc/tensor_codec.h: sizes, ids, types, ops, remote pointers
// placed in the connection's buffer), then decoded, validated, scheduled and
// computed on a CPU device like any graph. The connection holds one buffer,
// remote pointer kBuffer, whose bytes start at remote address kBase. Any
// payload must end in a status, never a crash, a sanitizer report or an
// access outside that buffer.

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/ggml_rpc/tensor_codec.h"
#include "proto/tessera.pb.h"
#include "tests/fuzz/compute_sandbox.h"

namespace {

using tessera::fuzz::ComputeSandbox;

constexpr uint64_t kBuffer = 0x1000;
constexpr uint64_t kBase = 0x100000;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* sandbox = new ComputeSandbox();
  uint64_t buffer = 0;
  auto session = sandbox->NewSession(buffer);
  const tessera::ggml_rpc::PlaceFn place =
      [&](uint64_t remote_buffer, uint64_t address,
          uint64_t bytes) -> absl::StatusOr<tessera::v1::TensorRef> {
    const uint64_t limit = ComputeSandbox::kBufferBytes;
    if (remote_buffer != kBuffer || address < kBase ||
        address - kBase > limit || bytes > limit - (address - kBase)) {
      return absl::InvalidArgumentError("outside the buffer");
    }
    tessera::v1::TensorRef ref;
    ref.set_buffer(buffer);
    ref.set_offset(address - kBase);
    return ref;
  };
  auto parsed = tessera::ggml_rpc::ParseGraph(
      absl::MakeConstSpan(data, size), ComputeSandbox::kMaxTensors, place);
  tessera::v1::ComputeRequest request;
  if (parsed.ok()) *request.mutable_graph() = std::move(parsed->def);
  sandbox->Compute(*session, request);
  return 0;
}
