#include "proto/ggml_rpc/protocol.h"

namespace tessera::ggml_rpc {

absl::string_view CommandName(uint8_t command) {
  constexpr absl::string_view kNames[kCommandCount] = {
      "ALLOC_BUFFER",    "GET_ALIGNMENT",  "GET_MAX_SIZE",  "BUFFER_GET_BASE",
      "FREE_BUFFER",     "BUFFER_CLEAR",   "SET_TENSOR",    "SET_TENSOR_HASH",
      "GET_TENSOR",      "COPY_TENSOR",    "GRAPH_COMPUTE", "GET_DEVICE_MEMORY",
      "INIT_TENSOR",     "GET_ALLOC_SIZE", "HELLO",         "DEVICE_COUNT",
      "GRAPH_RECOMPUTE", "MEMSET_TENSOR",
  };
  return command < kCommandCount ? kNames[command] : "unknown command";
}

uint64_t Fnv1a64(uint64_t hash, absl::Span<const uint8_t> bytes) {
  constexpr uint64_t kPrime = 0x100000001b3ULL;
  for (uint8_t b : bytes) {
    hash ^= b;
    hash *= kPrime;
  }
  return hash;
}

uint64_t Fnv1a64(absl::Span<const uint8_t> bytes) {
  return Fnv1a64(kFnvOffsetBasis, bytes);
}

}  // namespace tessera::ggml_rpc
