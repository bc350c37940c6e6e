#ifndef TESSERA_BACKEND_META_TP_PLAN_H_
#define TESSERA_BACKEND_META_TP_PLAN_H_

// The per-member programs of a graph computed on a meta device: split
// states propagated op by op, member graphs, and the collectives between
// them (internal to backend/meta).
//
// Rules, per op (a "split" below is along an axis, "whole" is MIRRORED):
//   MUL_MAT(a, b): a split on its rows (axis 1) x b whole -> split on axis 0;
//     a split on the reduced axis 0 x b split alike (or whole, sliced to
//     match) -> PARTIAL; a whole x b split on axis 1..3 -> split alike; a
//     whole x b PARTIAL -> PARTIAL; a and b split alike on axis 2 or 3
//     (heads) -> split alike.
//   ADD, SUB: PARTIAL + PARTIAL -> PARTIAL. MUL, DIV: PARTIAL by whole ->
//     PARTIAL. SCALE without bias keeps PARTIAL.
//   Elementwise (ADD, SUB, MUL, DIV, GLU with two operands, SCALE, SQR,
//     SQRT, LOG, unary, CONT, DUP): follow the split operand; a whole
//     operand is sliced to match (broadcast axes of extent 1 stay whole).
//   Per-row (RMS_NORM, NORM, SOFT_MAX, ROPE, GLU of one operand): keep a
//     split that does not cut a row (axis >= 1; ROPE: the head axis 1);
//     otherwise the input is gathered first. SOFT_MAX with ALiBi keeps
//     no head split.
//   View ops (RESHAPE, VIEW, PERMUTE, TRANSPOSE): PERMUTE moves the split
//     axis; RESHAPE of a contiguous split tensor keeps the split where an
//     axis of the result holds the split axis merged with whole inner axes
//     or cut into whole parts ([h*d, t] split on 0 <-> [d, h, t] split on
//     1: attention heads); otherwise a view of the whole tensor.
//   Whole-only (GET_ROWS, SUM_ROWS, MEAN, ARGMAX, CONCAT): every input
//     gathered, every member computes the whole result.
//   SET_ROWS (in place): keeps its destination's state. A whole destination
//     gets whole rows; one split on axis 0 (a KV cache [n_embd_kv, n_ctx]
//     split by heads), or on a head axis 2/3 that the indices do not vary
//     along, gets b split alike (or whole, sliced to match). Any other
//     destination (PARTIAL, split otherwise, written through a partial
//     view) is made whole in place first and stays whole. A VIEW that
//     only reshapes its contiguous source follows the RESHAPE rule.
//   FLASH_ATTN_EXT(q, k, v, mask): q split on its heads (axis 2) in whole
//     groups of the GQA ratio r, without ALiBi and with a mask broadcast
//     over heads -> split on the result's head axis 1; k and v split on
//     their heads with q's lengths / r (or whole, sliced to match); with
//     one KV head, q split on any heads and k and v whole; otherwise
//     computed whole.
// Collectives: PARTIAL -> whole is an in-place AllReduce; split -> whole
// an AllGather (even split; rearranged with PERMUTE + CONT when the split
// axis is not outermost) or, for uneven or segmented splits, zero + copy +
// AllReduce (types that collectives do not sum, integers and blocks: each
// piece copied into scratch by its member, broadcast, and copied into
// place). A split view whose members are not contiguous is made contiguous
// before it is gathered. Every node flagged kFlagOutput, and the last node,
// ends non-PARTIAL. Other ops (ARGSORT, CPY) have no rule.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/meta/split_state.h"
#include "graph/context.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace tessera {

class MetaDevice;

// Whether a rule above covers `node`'s op.
bool HasSplitRule(const Tensor& node);

struct TpStep {
  enum class Kind { kCompute, kAllReduce, kAllGather, kBroadcast, kZero };
  Kind kind = Kind::kCompute;
  // kCompute: one graph per member.
  std::vector<std::unique_ptr<Graph>> graphs;
  // kAllReduce, kBroadcast, kZero: the tensors; kAllGather: send in `a`,
  // receive in `b`.
  std::vector<Tensor*> a;
  std::vector<Tensor*> b;
  // kBroadcast: the member whose tensor every other receives.
  int root = 0;
};

// A derived program. Owns its member tensors and scratch memory; must
// outlive the work queued from it.
struct TpPlan {
  Context ctx;
  std::vector<TpStep> steps;
  std::vector<std::unique_ptr<Buffer>> scratch;
  // Zeros for kZero steps (host memory that member streams read).
  std::vector<uint8_t> zeros;
  // The state each node has at the end, recorded in its buffer per run.
  std::vector<std::pair<Tensor*, SplitState>> final_states;
  // Identifies the graph it was made for (nodes, sources and their data).
  std::vector<const void*> fingerprint;
  // Collectives per run, for tests and benchmarks.
  int n_collectives = 0;
};

// What identifies `graph` for the plan cache.
std::vector<const void*> Fingerprint(const Graph& graph);

// Derives the program of `graph` on `device`. Every tensor of the graph
// must lie in `device`'s meta buffers. Errors: INVALID_ARGUMENT for a
// tensor outside them or a policy's bad split; UNIMPLEMENTED for an op or
// a layout with no rule; a member's allocation error for scratch memory.
absl::StatusOr<std::unique_ptr<TpPlan>> DerivePlan(MetaDevice& device,
                                                   const Graph& graph);

}  // namespace tessera

#endif  // TESSERA_BACKEND_META_TP_PLAN_H_
