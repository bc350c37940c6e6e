#include "proto/split_state_codec.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/tensor.h"

namespace tessera::wire {
namespace {

absl::Status Invalid(absl::string_view what, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", problem));
}

}  // namespace

v1::SplitStateDef ToProto(const SplitState& state) {
  v1::SplitStateDef def;
  if (state.is_split()) {
    def.set_kind(v1::SplitStateDef::AXIS);
    def.set_axis(state.axis_index());
    def.set_n_segments(state.n_segments);
    for (int64_t length : state.lengths) def.add_lengths(length);
  } else {
    def.set_kind(state.axis == SplitAxis::kPartial
                     ? v1::SplitStateDef::PARTIAL
                     : v1::SplitStateDef::MIRRORED);
  }
  return def;
}

absl::StatusOr<SplitState> FromProto(const v1::SplitStateDef& def) {
  switch (def.kind()) {
    case v1::SplitStateDef::MIRRORED:
    case v1::SplitStateDef::PARTIAL:
      if (def.axis() != 0 || def.n_segments() > 1 || def.lengths_size() != 0) {
        return Invalid("split",
                       absl::StrCat(v1::SplitStateDef::Kind_Name(def.kind()),
                                    " with an axis, segments or lengths"));
      }
      return def.kind() == v1::SplitStateDef::PARTIAL ? SplitState::Partial()
                                                      : SplitState::Mirrored();
    case v1::SplitStateDef::AXIS:
      break;
    default:
      return Invalid("split", absl::StrCat("unknown kind ", def.kind()));
  }
  if (def.axis() >= static_cast<uint32_t>(kMaxDims)) {
    return Invalid("split",
                   absl::StrCat("axis ", def.axis(), " is not in 0..3"));
  }
  if (def.n_segments() < 1) {
    return Invalid("split", "AXIS with n_segments below 1");
  }
  if (def.lengths_size() == 0 || def.lengths_size() > kMaxSplitLengths) {
    return Invalid("split",
                   absl::StrCat(def.lengths_size(), " lengths, want 1 to ",
                                kMaxSplitLengths));
  }
  if (def.lengths_size() % def.n_segments() != 0) {
    return Invalid(
        "split",
        absl::StrCat(def.lengths_size(), " lengths for ", def.n_segments(),
                     " segments: not the same count per segment"));
  }
  SplitState state{.axis = static_cast<SplitAxis>(def.axis()),
                   .n_segments = static_cast<int>(def.n_segments())};
  state.lengths.assign(def.lengths().begin(), def.lengths().end());
  return state;
}

v1::TensorLayout ToProto(const TensorLayout& layout) {
  v1::TensorLayout out;
  out.set_type(static_cast<int32_t>(layout.type));
  for (int64_t n : layout.ne) out.add_ne(n);
  *out.mutable_split() = ToProto(layout.split);
  return out;
}

absl::StatusOr<TensorLayout> FromProto(const v1::TensorLayout& layout) {
  if (!IsValidType(layout.type())) {
    return Invalid("layout", absl::StrCat("unknown type ", layout.type()));
  }
  if (layout.ne_size() < 1 || layout.ne_size() > kMaxDims) {
    return Invalid("layout", absl::StrCat(layout.ne_size(),
                                          " dimensions, want 1 to ", kMaxDims));
  }
  TensorLayout out{.type = static_cast<Type>(layout.type())};
  for (int64_t n : layout.ne()) {
    if (n < 0) return Invalid("layout", absl::StrCat("extent ", n));
    out.ne.push_back(n);
  }
  absl::StatusOr<SplitState> split = FromProto(layout.split());
  if (!split.ok()) {
    return Invalid("layout", split.status().message());
  }
  out.split = *std::move(split);
  return out;
}

}  // namespace tessera::wire
