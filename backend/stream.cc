#include "backend/stream.h"

namespace tessera {

absl::Status Stream::Compute(const Graph& graph) {
  if (absl::Status s = ComputeAsync(graph); !s.ok()) return s;
  return Synchronize();
}

}  // namespace tessera
