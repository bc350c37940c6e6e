#ifndef TESSERA_PROTO_SPLIT_STATE_CODEC_H_
#define TESSERA_PROTO_SPLIT_STATE_CODEC_H_

// Split states on the wire: SplitState (backend/meta/split_state.h) <->
// v1::SplitStateDef, and a tensor with its split state <-> v1::TensorLayout
// (WriteTensor to a meta device's buffer; graph tensors with data).
// FromProto checks the message's own structure; whether a state fits a
// tensor and a device's member count is ValidateSplit's business.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/meta/split_state.h"
#include "graph/type.h"
#include "proto/tessera.pb.h"

namespace tessera::wire {

// The most lengths (segments times members) a SplitStateDef may carry.
inline constexpr int kMaxSplitLengths = 4096;

v1::SplitStateDef ToProto(const SplitState& state);
// Errors: INVALID_ARGUMENT "split: PROBLEM" for an unknown kind; for AXIS an
// axis outside 0..3, n_segments below 1, no lengths, more than
// kMaxSplitLengths or a count that is not a multiple of n_segments; for
// MIRRORED and PARTIAL an axis, segments or lengths.
absl::StatusOr<SplitState> FromProto(const v1::SplitStateDef& def);

// A contiguous tensor's type and shape with its split state.
struct TensorLayout {
  Type type = Type::kF32;
  std::vector<int64_t> ne;
  SplitState split;
};

v1::TensorLayout ToProto(const TensorLayout& layout);
// Errors: INVALID_ARGUMENT "layout: PROBLEM" for an unknown type, not 1 to
// 4 dimensions, a negative extent, and FromProto(SplitStateDef)'s errors.
absl::StatusOr<TensorLayout> FromProto(const v1::TensorLayout& layout);

}  // namespace tessera::wire

#endif  // TESSERA_PROTO_SPLIT_STATE_CODEC_H_
