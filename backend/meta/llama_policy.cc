#include "backend/meta/llama_policy.h"

#include <string>

namespace tessera {
namespace {

bool Named(const Tensor& t, std::string_view part) {
  return t.name.find(part) != std::string::npos;
}

// `state` when it is valid for `t`, else MIRRORED.
SplitState OrMirrored(absl::StatusOr<SplitState> state, const Tensor& t,
                      int n) {
  if (!state.ok() || !ValidateSplit(*state, t, n).ok()) {
    return SplitState::Mirrored();
  }
  return *std::move(state);
}

}  // namespace

SplitPolicy MirroredPolicy() {
  return [](const Tensor&) { return SplitState::Mirrored(); };
}

SplitPolicy LlamaSplitPolicy(int n, LlamaSplitOptions o) {
  return [n, o](const Tensor& t) -> SplitState {
    const int64_t q_unit = o.head_dim * o.gqa_ratio;
    if (Named(t, "attn_qkv")) {
      // [in, q + 2 kv]: q = gqa_ratio * kv.
      const int64_t kv = t.ne[1] / (o.gqa_ratio + 2);
      const int64_t segs[] = {t.ne[1] - 2 * kv, kv, kv};
      return OrMirrored(SplitState::Segmented(1, segs, n, o.head_dim), t, n);
    }
    if (Named(t, "attn_q")) {
      return OrMirrored(SplitState::Even(1, t.ne[1], n, q_unit), t, n);
    }
    if (Named(t, "cache_k") || Named(t, "cache_v")) {
      return OrMirrored(SplitState::Even(0, t.ne[0], n, o.head_dim), t, n);
    }
    if (Named(t, "attn_k") || Named(t, "attn_v")) {
      return OrMirrored(SplitState::Even(1, t.ne[1], n, o.head_dim), t, n);
    }
    if (Named(t, "attn_output")) {
      return OrMirrored(SplitState::Even(0, t.ne[0], n, q_unit), t, n);
    }
    if (Named(t, "ffn_gate") || Named(t, "ffn_up")) {
      return OrMirrored(SplitState::Even(1, t.ne[1], n, o.ffn_granularity), t,
                        n);
    }
    if (Named(t, "ffn_down")) {
      return OrMirrored(SplitState::Even(0, t.ne[0], n, o.ffn_granularity), t,
                        n);
    }
    return SplitState::Mirrored();
  };
}

}  // namespace tessera
