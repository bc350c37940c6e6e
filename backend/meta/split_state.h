#ifndef TESSERA_BACKEND_META_SPLIT_STATE_H_
#define TESSERA_BACKEND_META_SPLIT_STATE_H_

// How a tensor of a meta device (backend/meta/meta_device.h) is laid out
// over its N member devices (ggml's ggml_backend_meta_split_state):
//   - split along axis 0..3: each member holds a slice along that axis;
//   - MIRRORED: each member holds a full copy;
//   - PARTIAL: each member holds a full-shape partial sum; the value is the
//     element-wise sum over members.
// A split may be cut into segments, each split across the members on its
// own: a fused QKV weight is three segments, so that each member gets a
// slice of Q, of K and of V. Member i's tensor holds its slices of segment
// 0, 1, ... one after another along the axis. Splits may be uneven (an
// extent not divisible by N), in units of a granularity (whole quantized
// blocks along axis 0, whole attention heads).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "graph/tensor.h"

namespace tessera {

enum class SplitAxis : int32_t {
  kAxis0 = 0,
  kAxis1 = 1,
  kAxis2 = 2,
  kAxis3 = 3,
  kMirrored = 10,
  kPartial = 11,
};

std::string_view SplitAxisName(SplitAxis axis);

// One contiguous run of a member's slice along the split axis.
struct SlicePiece {
  int64_t full_offset = 0;    // where it starts in the whole tensor
  int64_t member_offset = 0;  // where it starts in the member's tensor
  int64_t length = 0;
};

// A value type. For split axes, `lengths` has one entry per segment and
// member, segments outer: [seg0_m0, seg0_m1, ..., seg1_m0, ...]; their sum
// is the tensor's extent along the axis. Empty for MIRRORED and PARTIAL.
struct SplitState {
  SplitAxis axis = SplitAxis::kMirrored;
  int n_segments = 1;
  std::vector<int64_t> lengths;

  static SplitState Mirrored() { return SplitState{}; }
  static SplitState Partial() {
    return SplitState{.axis = SplitAxis::kPartial};
  }
  // A split of `extent` along `axis` over `n_members`, in units of
  // `granularity` handed out as evenly as possible (the first members get
  // one more unit where they do not divide).
  // Errors: INVALID_ARGUMENT for an axis outside 0..3, n_members < 1,
  // granularity < 1 or an extent that is not a multiple of it.
  static absl::StatusOr<SplitState> Even(int axis, int64_t extent,
                                         int n_members,
                                         int64_t granularity = 1);
  // The same per segment: segment j has extent segment_extents[j].
  static absl::StatusOr<SplitState> Segmented(
      int axis, absl::Span<const int64_t> segment_extents, int n_members,
      int64_t granularity = 1);

  bool is_split() const { return static_cast<int32_t>(axis) < kMaxDims; }
  // The split axis; only for is_split().
  int axis_index() const { return static_cast<int>(axis); }
  // The number of members the lengths are for (0 when not split).
  int n_members() const {
    return is_split() ? static_cast<int>(lengths.size()) / n_segments : 0;
  }
  // Member `member`'s extent along the axis (the sum over segments).
  int64_t MemberExtent(int member) const;
  // Member `member`'s pieces, one per segment with a non-zero length.
  std::vector<SlicePiece> Pieces(int member) const;
  // Whether `other` slices the axis in the same pieces for every member
  // (segment boundaries aside).
  bool SameSlices(const SplitState& other) const;

  // "split(0: 32,32)", "mirrored", "partial" for messages.
  std::string ToString() const;

  friend bool operator==(const SplitState& a, const SplitState& b) {
    return a.axis == b.axis && a.n_segments == b.n_segments &&
           a.lengths == b.lengths;
  }
};

// Checks that `state` fits `t` over `n_members` members: lengths for every
// segment and member, non-negative, adding up to t.ne[axis]; along axis 0
// of a quantized type every piece is whole blocks; MIRRORED and PARTIAL
// have no lengths; PARTIAL only for a type collectives reduce (F32, F16,
// BF16). Errors: INVALID_ARGUMENT naming the tensor and the problem.
absl::Status ValidateSplit(const SplitState& state, const Tensor& t,
                           int n_members);

// Member `member`'s shape of `t` under `state` (the axis' extent replaced
// by the member's).
void MemberShape(const Tensor& t, const SplitState& state, int member,
                 int64_t ne[kMaxDims]);

}  // namespace tessera

#endif  // TESSERA_BACKEND_META_SPLIT_STATE_H_
