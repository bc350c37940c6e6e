#include "proto/ggml_rpc/protocol.h"

namespace tessera::ggml_rpc {

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
