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
    // KV heads of the layer, from a query-side extent (heads * head_dim) or
    // a KV-side one.
    const auto kv_of_q = [&](int64_t q_extent) {
      return q_extent / (o.head_dim * o.gqa_ratio);
    };
    const auto kv_of_kv = [&](int64_t kv_extent) {
      return kv_extent / o.head_dim;
    };
    // Fewer KV heads than members: one KV head is mirrored and the query
    // heads are split one by one (each reads the one KV head); with more
    // than one, attention stays whole on every member.
    const auto q_unit_for = [&](int64_t n_kv) -> int64_t {
      if (n_kv >= n) return o.head_dim * o.gqa_ratio;
      return n_kv == 1 ? o.head_dim : 0;
    };
    if (Named(t, "attn_qkv")) {
      // [in, q + 2 kv]: q = gqa_ratio * kv.
      const int64_t kv = t.ne[1] / (o.gqa_ratio + 2);
      const int64_t segs[] = {t.ne[1] - 2 * kv, kv, kv};
      return OrMirrored(SplitState::Segmented(1, segs, n, o.head_dim), t, n);
    }
    if (Named(t, "attn_q")) {
      const int64_t unit = q_unit_for(kv_of_q(t.ne[1]));
      if (unit == 0) return SplitState::Mirrored();
      return OrMirrored(SplitState::Even(1, t.ne[1], n, unit), t, n);
    }
    if (Named(t, "cache_k") || Named(t, "cache_v")) {
      if (kv_of_kv(t.ne[0]) < n) return SplitState::Mirrored();
      return OrMirrored(SplitState::Even(0, t.ne[0], n, o.head_dim), t, n);
    }
    if (Named(t, "attn_k") || Named(t, "attn_v")) {
      if (kv_of_kv(t.ne[1]) < n) return SplitState::Mirrored();
      return OrMirrored(SplitState::Even(1, t.ne[1], n, o.head_dim), t, n);
    }
    if (Named(t, "attn_output")) {
      const int64_t unit = q_unit_for(kv_of_q(t.ne[0]));
      if (unit == 0) return SplitState::Mirrored();
      return OrMirrored(SplitState::Even(0, t.ne[0], n, unit), t, n);
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
