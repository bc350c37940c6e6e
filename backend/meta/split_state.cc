#include "backend/meta/split_state.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/type.h"

namespace tessera {

std::string_view SplitAxisName(SplitAxis axis) {
  switch (axis) {
    case SplitAxis::kAxis0:
      return "axis0";
    case SplitAxis::kAxis1:
      return "axis1";
    case SplitAxis::kAxis2:
      return "axis2";
    case SplitAxis::kAxis3:
      return "axis3";
    case SplitAxis::kMirrored:
      return "mirrored";
    case SplitAxis::kPartial:
      return "partial";
  }
  return "unknown";
}

absl::StatusOr<SplitState> SplitState::Even(int axis, int64_t extent,
                                            int n_members,
                                            int64_t granularity) {
  const int64_t extents[] = {extent};
  return Segmented(axis, extents, n_members, granularity);
}

absl::StatusOr<SplitState> SplitState::Segmented(
    int axis, absl::Span<const int64_t> segment_extents, int n_members,
    int64_t granularity) {
  if (axis < 0 || axis >= kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("[SplitState] split axis ", axis, " is not in 0..3"));
  }
  if (n_members < 1 || granularity < 1 || segment_extents.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[SplitState] need members >= 1, granularity >= 1 and a segment; got ",
        n_members, ", ", granularity, ", ", segment_extents.size()));
  }
  SplitState state{.axis = static_cast<SplitAxis>(axis),
                   .n_segments = static_cast<int>(segment_extents.size())};
  for (int64_t extent : segment_extents) {
    if (extent < 0 || extent % granularity != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("[SplitState] segment extent ", extent,
                       " is not a multiple of the granularity ", granularity));
    }
    const int64_t units = extent / granularity;
    for (int i = 0; i < n_members; ++i) {
      const int64_t member_units =
          units / n_members + (i < units % n_members ? 1 : 0);
      state.lengths.push_back(member_units * granularity);
    }
  }
  return state;
}

int64_t SplitState::MemberExtent(int member) const {
  int64_t sum = 0;
  for (const SlicePiece& p : Pieces(member)) sum += p.length;
  return sum;
}

std::vector<SlicePiece> SplitState::Pieces(int member) const {
  std::vector<SlicePiece> pieces;
  const int n = n_members();
  if (n == 0) return pieces;
  int64_t full = 0;
  int64_t mine = 0;
  for (int s = 0; s < n_segments; ++s) {
    for (int i = 0; i < n; ++i) {
      const int64_t len = lengths[s * n + i];
      if (i == member && len > 0) {
        pieces.push_back({full, mine, len});
        mine += len;
      }
      full += len;
    }
  }
  return pieces;
}

bool SplitState::SameSlices(const SplitState& other) const {
  if (axis != other.axis || !is_split()) return axis == other.axis;
  const int n = n_members();
  if (n != other.n_members()) return false;
  for (int i = 0; i < n; ++i) {
    // Adjacent pieces merge: compare the covered ranges.
    auto merged = [](std::vector<SlicePiece> pieces) {
      std::vector<SlicePiece> out;
      for (const SlicePiece& p : pieces) {
        if (!out.empty() &&
            out.back().full_offset + out.back().length == p.full_offset) {
          out.back().length += p.length;
        } else {
          out.push_back(p);
        }
      }
      return out;
    };
    std::vector<SlicePiece> a = merged(Pieces(i));
    std::vector<SlicePiece> b = merged(other.Pieces(i));
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k) {
      if (a[k].full_offset != b[k].full_offset || a[k].length != b[k].length) {
        return false;
      }
    }
  }
  return true;
}

std::string SplitState::ToString() const {
  if (!is_split()) return std::string(SplitAxisName(axis));
  return absl::StrCat(
      "split(", axis_index(),
      n_segments > 1 ? absl::StrCat(", ", n_segments, " segs") : "", ": ",
      absl::StrJoin(lengths, ","), ")");
}

absl::Status ValidateSplit(const SplitState& state, const Tensor& t,
                           int n_members) {
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("[ValidateSplit] ", state.ToString(), " of ", Describe(t),
                     " over ", n_members, " members: ", parts...));
  };
  if (!state.is_split()) {
    if (state.axis != SplitAxis::kMirrored &&
        state.axis != SplitAxis::kPartial) {
      return error("unknown split axis");
    }
    if (!state.lengths.empty()) return error("lengths on an unsplit tensor");
    if (state.axis == SplitAxis::kPartial && t.type != Type::kF32 &&
        t.type != Type::kF16 && t.type != Type::kBF16) {
      return error("partial sums of a type that is not reduced");
    }
    return absl::OkStatus();
  }
  if (state.n_segments < 1 ||
      state.lengths.size() != static_cast<size_t>(state.n_segments) *
                                  static_cast<size_t>(n_members)) {
    return error("need ", n_members, " lengths per segment");
  }
  // Each length is within the extent, so the running sum stops before it
  // could overflow.
  const int64_t extent = t.ne[state.axis_index()];
  int64_t sum = 0;
  for (int64_t len : state.lengths) {
    if (len < 0) return error("a negative length");
    if (len > extent - sum) {
      return error("lengths add up to more than ", extent);
    }
    sum += len;
  }
  if (sum != extent) {
    return error("lengths add up to ", sum, ", not ", extent);
  }
  const int64_t block = Traits(t.type).block_size;
  for (int i = 0; i < n_members; ++i) {
    for (const SlicePiece& p : state.Pieces(i)) {
      if (state.axis_index() == 0 &&
          (p.full_offset % block != 0 || p.length % block != 0)) {
        return error("a slice cuts a block of ", block, " values");
      }
    }
  }
  return absl::OkStatus();
}

void MemberShape(const Tensor& t, const SplitState& state, int member,
                 int64_t ne[kMaxDims]) {
  for (int d = 0; d < kMaxDims; ++d) ne[d] = t.ne[d];
  if (state.is_split()) ne[state.axis_index()] = state.MemberExtent(member);
}

}  // namespace tessera
