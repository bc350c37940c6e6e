#include "backend/meta/tp_plan.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "backend/alloc/tensor_allocator.h"
#include "backend/comm/communicator.h"
#include "backend/meta/meta_device.h"
#include "base/status_macros.h"
#include "graph/ops.h"

namespace tessera {
namespace {

// How an op's split is derived: the one list of the ops that have a rule.
enum class Rule {
  kNone,     // no rule: SupportsOp is false
  kLeaf,     // a tensor of the graph's inputs or weights
  kMulMat,   // MulMatRule
  kBinary,   // elementwise with a broadcast operand
  kGlu,      // binary with two operands, per row with one
  kFollow,   // elementwise of one operand
  kRow,      // per row, keeping a split that does not cut a row
  kWhole,    // computed on whole operands
  kView,     // views and reshapes
  kSetRows,  // SetRowsRule
  kFlashAttn,
};

Rule RuleOf(Op op) {
  switch (op) {
    case Op::kNone:
      return Rule::kLeaf;
    case Op::kMulMat:
      return Rule::kMulMat;
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv:
      return Rule::kBinary;
    case Op::kGlu:
      return Rule::kGlu;
    case Op::kScale:
    case Op::kSqr:
    case Op::kSqrt:
    case Op::kLog:
    case Op::kUnary:
    case Op::kCont:
    case Op::kDup:
      return Rule::kFollow;
    case Op::kRmsNorm:
    case Op::kNorm:
    case Op::kSoftMax:
    case Op::kRope:
      return Rule::kRow;
    case Op::kGetRows:
    case Op::kSumRows:
    case Op::kMean:
    case Op::kArgmax:
    case Op::kConcat:
      return Rule::kWhole;
    case Op::kReshape:
    case Op::kView:
    case Op::kPermute:
    case Op::kTranspose:
      return Rule::kView;
    case Op::kSetRows:
      return Rule::kSetRows;
    case Op::kFlashAttnExt:
      return Rule::kFlashAttn;
    default:
      return Rule::kNone;
  }
}

// A tensor as the members hold it: its state and one tensor per member.
struct Placed {
  SplitState state;
  std::vector<Tensor*> m;
};

// Bytes of `length` indices along `axis` of a tensor of `type` whose stride
// there is `nb_axis`.
size_t AxisBytes(Type type, size_t nb_axis, int axis, int64_t length) {
  if (axis == 0) return RowSize(type, length);
  return static_cast<size_t>(length) * nb_axis;
}

bool IsEven(const SplitState& s) {
  if (s.n_segments != 1) return false;
  return std::all_of(s.lengths.begin(), s.lengths.end(),
                     [&](int64_t l) { return l == s.lengths[0]; });
}

// `s` with every length times `factor` (GQA: query heads per KV head).
SplitState Scaled(const SplitState& s, int64_t factor) {
  SplitState out = s;
  for (int64_t& l : out.lengths) l *= factor;
  return out;
}

class Deriver {
 public:
  Deriver(MetaDevice& device, TpPlan& plan)
      : device_(device), n_(device.size()), plan_(plan), scratch_(n_, 0) {}

  absl::Status Run(const Graph& graph) {
    for (Tensor* node : graph.nodes()) {
      absl::Status s = DeriveNode(node);
      if (!s.ok()) {
        return absl::Status(
            s.code(),
            absl::StrCat("[", device_.name(), "] node ", Describe(*node), " (",
                         std::string(OpName(node->op)), "): ", s.message()));
      }
    }
    // Outputs end whole or split, never as partial sums.
    for (size_t k = 0; k < graph.nodes().size(); ++k) {
      Tensor* node = graph.nodes()[k];
      const bool last = k + 1 == graph.nodes().size();
      Placed& p = placed_[node];
      if ((last || node->HasFlag(kFlagOutput)) &&
          p.state.axis == SplitAxis::kPartial) {
        TESSERA_RETURN_IF_ERROR(AllReduce(p));
      }
    }
    Flush();
    // In graph order, so that of two tensors at one place (memory the
    // allocator reused) the later one's state is recorded last.
    auto record = [&](Tensor* t) {
      auto it = placed_.find(t);
      if (it != placed_.end() && !t->IsView() && in_meta_.contains(t)) {
        plan_.final_states.emplace_back(t, it->second.state);
      }
    };
    for (Tensor* leaf : graph.leafs()) record(leaf);
    for (Tensor* node : graph.nodes()) record(node);
    return Finish();
  }

 private:
  absl::StatusOr<MetaBuffer*> BufferOf(const Tensor& t) {
    auto* b = dynamic_cast<MetaBuffer*>(t.buffer);
    if (b == nullptr || t.data == nullptr || &b->meta_device() != &device_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", Describe(t), " is not in a buffer of this meta device"));
    }
    return b;
  }

  // Member tensors of `t` at its offset in the member buffers.
  absl::StatusOr<std::vector<Tensor*>> AtMeta(Tensor* t, const SplitState& s) {
    TESSERA_ASSIGN_OR_RETURN(MetaBuffer * b, BufferOf(*t));
    in_meta_.insert(t);
    std::vector<Tensor*> m(n_);
    for (int i = 0; i < n_; ++i) {
      TESSERA_ASSIGN_OR_RETURN(Tensor proto, b->MemberTensor(*t, s, i));
      m[i] = plan_.ctx.NewTensorLike(proto);
      m[i]->data = proto.data;
      m[i]->buffer = proto.buffer;
    }
    return m;
  }

  // The members of a source: computed here, or a leaf / an input from
  // elsewhere with its recorded or policy state.
  absl::StatusOr<Placed*> Get(Tensor* t) {
    if (auto it = placed_.find(t); it != placed_.end()) return &it->second;
    if (t->IsView()) {
      // A view computed elsewhere: address it through its root, whole.
      TESSERA_ASSIGN_OR_RETURN(Placed root, Whole(t->view_src));
      Placed p{SplitState::Mirrored(), std::vector<Tensor*>(n_)};
      for (int i = 0; i < n_; ++i) p.m[i] = MemberView(*t, root.m[i]);
      return &(placed_[t] = std::move(p));
    }
    TESSERA_ASSIGN_OR_RETURN(MetaBuffer * b, BufferOf(*t));
    TESSERA_ASSIGN_OR_RETURN(SplitState s, b->StateOf(*t));
    TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> m, AtMeta(t, s));
    return &(placed_[t] = Placed{std::move(s), std::move(m)});
  }

  // A view like `meta` (shape, strides, offset from its root) over `root`.
  Tensor* MemberView(const Tensor& meta, Tensor* root) {
    Tensor* v = plan_.ctx.NewTensorLike(meta);
    for (Tensor*& s : v->src) s = nullptr;
    v->op = Op::kView;
    v->view_src = root->view_src != nullptr ? root->view_src : root;
    v->view_offs = meta.view_offs + root->view_offs;
    v->data = nullptr;
    v->buffer = nullptr;
    views_.push_back(v);
    return v;
  }

  Tensor* Scratch(int member, Type type, const int64_t ne[kMaxDims]) {
    Tensor* t = plan_.ctx.NewTensor(type, {ne[0], ne[1], ne[2], ne[3]}).value();
    const size_t align = device_.member(member).buffer_type().alignment();
    scratch_[member] = (scratch_[member] + align - 1) / align * align;
    scratch_tensors_.push_back({t, member, scratch_[member]});
    scratch_[member] += device_.member(member).buffer_type().AllocSize(*t);
    return t;
  }

  // A builder's new tensor: views get data at Finish, others scratch.
  Tensor* Adopt(int member, Tensor* t) {
    if (t->IsView()) {
      views_.push_back(t);
      return t;
    }
    Scratch(member, t->type, t->ne);
    scratch_tensors_.back().tensor = t;  // the placement goes to `t`
    Emit(member, t);
    return t;
  }

  void Emit(int member, Tensor* t) {
    if (open_.empty()) {
      for (int i = 0; i < n_; ++i) open_.push_back(std::make_unique<Graph>());
    }
    open_[member]->AddNode(t);
  }

  void Flush() {
    if (open_.empty()) return;
    TpStep step;
    step.graphs = std::move(open_);
    open_.clear();
    plan_.steps.push_back(std::move(step));
  }

  void Collective(TpStep::Kind kind, std::vector<Tensor*> a,
                  std::vector<Tensor*> b = {}) {
    Flush();
    TpStep step;
    step.kind = kind;
    step.a = std::move(a);
    step.b = std::move(b);
    if (kind != TpStep::Kind::kZero) ++plan_.n_collectives;
    plan_.steps.push_back(std::move(step));
  }

  absl::Status AllReduce(Placed& p) {
    for (Tensor* t : p.m) {
      if (!t->IsContiguous() || !IsReducedType(t->type)) {
        return absl::UnimplementedError(
            absl::StrCat("cannot all-reduce ", Describe(*t)));
      }
    }
    Collective(TpStep::Kind::kAllReduce, p.m);
    p.state = SplitState::Mirrored();
    return absl::OkStatus();
  }

  // The whole value of `t` on every member: PARTIAL is all-reduced in
  // place; a split is gathered into scratch (cached).
  absl::StatusOr<Placed> Whole(Tensor* t) {
    TESSERA_ASSIGN_OR_RETURN(Placed * p, Get(t));
    if (p->state.axis == SplitAxis::kMirrored) return *p;
    if (p->state.axis == SplitAxis::kPartial) {
      TESSERA_RETURN_IF_ERROR(AllReduce(*p));
      return *p;
    }
    if (auto it = whole_.find(t); it != whole_.end()) return it->second;
    TESSERA_ASSIGN_OR_RETURN(Placed w, Gather(*t, *p));
    whole_[t] = w;
    return w;
  }

  // A split view whose members are not contiguous (a permuted or strided
  // view of a split tensor) is made contiguous on each member first.
  absl::StatusOr<Placed> Gather(const Tensor& t, const Placed& split) {
    Placed p = split;
    for (int i = 0; i < n_; ++i) {
      if (p.m[i]->IsContiguous()) continue;
      TESSERA_ASSIGN_OR_RETURN(Tensor * c, Cont(plan_.ctx, p.m[i]));
      p.m[i] = Adopt(i, c);
    }
    const SplitState& s = p.state;
    const int d = s.axis_index();
    Placed w{SplitState::Mirrored(), std::vector<Tensor*>(n_)};
    if (IsEven(s)) {
      const int64_t l = s.lengths[0];
      int64_t inner = 1, outer = 1;
      for (int k = 0; k < d; ++k) inner *= t.ne[k];
      for (int k = d + 1; k < kMaxDims; ++k) outer *= t.ne[k];
      std::vector<Tensor*> recv(n_);
      for (int i = 0; i < n_; ++i) {
        if (outer == 1) {
          recv[i] = Scratch(i, t.type, t.ne);
        } else if (d == 0) {
          const int64_t ne[kMaxDims] = {l, outer, n_, 1};
          recv[i] = Scratch(i, t.type, ne);
        } else {
          const int64_t ne[kMaxDims] = {inner, l, outer, n_};
          recv[i] = Scratch(i, t.type, ne);
        }
      }
      Collective(TpStep::Kind::kAllGather, p.m, recv);
      for (int i = 0; i < n_; ++i) {
        if (outer == 1) {
          w.m[i] = recv[i];
          continue;
        }
        // Rank-ordered blocks -> the split axis: swap the member axis in.
        TESSERA_ASSIGN_OR_RETURN(
            Tensor * perm, d == 0 ? Permute(plan_.ctx, recv[i], 0, 2, 1, 3)
                                  : Permute(plan_.ctx, recv[i], 0, 1, 3, 2));
        Adopt(i, perm);
        TESSERA_ASSIGN_OR_RETURN(Tensor * cont, Cont(plan_.ctx, perm));
        Adopt(i, cont);
        TESSERA_ASSIGN_OR_RETURN(
            Tensor * full,
            Reshape(plan_.ctx, cont, {t.ne[0], t.ne[1], t.ne[2], t.ne[3]}));
        w.m[i] = Adopt(i, full);
      }
      return w;
    }
    // Uneven or segmented: zeros everywhere but the member's pieces, then
    // sum; types that collectives do not sum (integers, blocks) are
    // broadcast piece by piece.
    if (!IsReducedType(t.type)) return GatherByBroadcast(t, p);
    for (int i = 0; i < n_; ++i) w.m[i] = Scratch(i, t.type, t.ne);
    Collective(TpStep::Kind::kZero, w.m);
    plan_.zeros.resize(std::max(plan_.zeros.size(), w.m[0]->NumBytes()));
    for (int i = 0; i < n_; ++i) {
      Tensor* full = w.m[i];
      Tensor* mine = p.m[i];
      for (const SlicePiece& piece : s.Pieces(i)) {
        int64_t ne[kMaxDims];
        for (int k = 0; k < kMaxDims; ++k) ne[k] = t.ne[k];
        ne[d] = piece.length;
        TESSERA_ASSIGN_OR_RETURN(
            Tensor * from,
            View(plan_.ctx, mine, ne, {mine->nb[1], mine->nb[2], mine->nb[3]},
                 AxisBytes(t.type, mine->nb[d], d, piece.member_offset)));
        Adopt(i, from);
        TESSERA_ASSIGN_OR_RETURN(
            Tensor * to,
            View(plan_.ctx, full, ne, {full->nb[1], full->nb[2], full->nb[3]},
                 AxisBytes(t.type, full->nb[d], d, piece.full_offset)));
        Adopt(i, to);
        TESSERA_ASSIGN_OR_RETURN(Tensor * cpy, Cpy(plan_.ctx, from, to));
        views_.push_back(cpy);
        Emit(i, cpy);
      }
    }
    Collective(TpStep::Kind::kAllReduce, w.m);
    return w;
  }

  // The whole value of split `t` on every member, one piece at a time: its
  // owner copies it into a contiguous scratch tensor, broadcasts that, and
  // every member copies it into place.
  absl::StatusOr<Placed> GatherByBroadcast(const Tensor& t, const Placed& p) {
    const SplitState& s = p.state;
    const int d = s.axis_index();
    Placed w{SplitState::Mirrored(), std::vector<Tensor*>(n_)};
    for (int i = 0; i < n_; ++i) w.m[i] = Scratch(i, t.type, t.ne);
    // A view of `piece_ne` at `offset` along axis d of contiguous `whole`.
    auto piece_view = [&](int member, Tensor* whole,
                          const int64_t piece_ne[kMaxDims],
                          int64_t offset) -> absl::StatusOr<Tensor*> {
      TESSERA_ASSIGN_OR_RETURN(
          Tensor * v,
          View(plan_.ctx, whole,
               {piece_ne[0], piece_ne[1], piece_ne[2], piece_ne[3]},
               {whole->nb[1], whole->nb[2], whole->nb[3]},
               AxisBytes(t.type, whole->nb[d], d, offset)));
      return Adopt(member, v);
    };
    auto copy = [&](int member, Tensor* from, Tensor* to) -> absl::Status {
      TESSERA_ASSIGN_OR_RETURN(Tensor * cpy, Cpy(plan_.ctx, from, to));
      views_.push_back(cpy);
      Emit(member, cpy);
      return absl::OkStatus();
    };
    for (int root = 0; root < n_; ++root) {
      for (const SlicePiece& piece : s.Pieces(root)) {
        int64_t ne[kMaxDims];
        for (int k = 0; k < kMaxDims; ++k) ne[k] = t.ne[k];
        ne[d] = piece.length;
        std::vector<Tensor*> buf(n_);
        for (int i = 0; i < n_; ++i) buf[i] = Scratch(i, t.type, ne);
        TESSERA_ASSIGN_OR_RETURN(
            Tensor * mine,
            piece_view(root, p.m[root], ne, piece.member_offset));
        TESSERA_RETURN_IF_ERROR(copy(root, mine, buf[root]));
        Collective(TpStep::Kind::kBroadcast, buf);
        plan_.steps.back().root = root;
        for (int i = 0; i < n_; ++i) {
          TESSERA_ASSIGN_OR_RETURN(
              Tensor * to, piece_view(i, w.m[i], ne, piece.full_offset));
          TESSERA_RETURN_IF_ERROR(copy(i, buf[i], to));
        }
      }
    }
    return w;
  }

  // Member slices of whole `w` (of shape `meta`) under split `s`.
  absl::StatusOr<std::vector<Tensor*>> SliceLike(const Placed& w,
                                                 const Tensor& meta,
                                                 const SplitState& s) {
    const int d = s.axis_index();
    std::vector<Tensor*> out(n_);
    for (int i = 0; i < n_; ++i) {
      std::vector<SlicePiece> pieces = s.Pieces(i);
      if (pieces.size() > 1) {
        return absl::UnimplementedError(absl::StrCat(
            "slicing ", Describe(meta), " like segmented ", s.ToString()));
      }
      const int64_t start = pieces.empty() ? 0 : pieces[0].full_offset;
      int64_t ne[kMaxDims];
      MemberShape(meta, s, i, ne);
      Tensor* whole = w.m[i];
      if (whole->nb[0] != Traits(whole->type).type_size) {
        // A view keeps nb[0]'s element (or block) stride: make a transposed
        // whole contiguous first.
        TESSERA_ASSIGN_OR_RETURN(Tensor * c, Cont(plan_.ctx, whole));
        whole = Adopt(i, c);
      }
      // Every slice of an empty tensor is empty, at its start.
      const size_t offset = whole->NumElements() == 0
                                ? 0
                                : AxisBytes(meta.type, whole->nb[d], d, start);
      TESSERA_ASSIGN_OR_RETURN(
          Tensor * v,
          View(plan_.ctx, whole, ne, {whole->nb[1], whole->nb[2], whole->nb[3]},
               offset));
      Adopt(i, v);
      if (v->IsContiguous()) {
        out[i] = v;
        continue;
      }
      TESSERA_ASSIGN_OR_RETURN(Tensor * c, Cont(plan_.ctx, v));
      out[i] = Adopt(i, c);
    }
    return out;
  }

  // The node's member tensors under `out` with member sources `srcs`
  // (srcs[k][i]: source k of member i; null entries keep no source).
  absl::Status Clone(Tensor* node, const SplitState& out,
                     const std::vector<std::vector<Tensor*>>& srcs) {
    TESSERA_RETURN_IF_ERROR(ValidateSplit(out, *node, n_));
    TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> m, AtMeta(node, out));
    for (int i = 0; i < n_; ++i) {
      for (int k = 0; k < kMaxSrc; ++k) {
        m[i]->src[k] = k < static_cast<int>(srcs.size()) && node->src[k]
                           ? srcs[k][i]
                           : nullptr;
      }
      m[i]->op = node->op;
      std::copy(std::begin(node->op_params), std::end(node->op_params),
                std::begin(m[i]->op_params));
      Emit(i, m[i]);
    }
    placed_[node] = Placed{out, std::move(m)};
    return absl::OkStatus();
  }

  absl::Status AllWhole(Tensor* node) {
    std::vector<std::vector<Tensor*>> srcs;
    for (int k = 0; k < kMaxSrc && node->src[k] != nullptr; ++k) {
      TESSERA_ASSIGN_OR_RETURN(Placed w, Whole(node->src[k]));
      srcs.push_back(w.m);
    }
    return Clone(node, SplitState::Mirrored(), srcs);
  }

  absl::Status DeriveNode(Tensor* node) {
    switch (RuleOf(node->op)) {
      case Rule::kLeaf:
        return Get(node).status();
      case Rule::kMulMat:
        return MulMatRule(node);
      case Rule::kBinary:
        return BinaryRule(node);
      case Rule::kGlu:
        if (node->src[1] != nullptr) return BinaryRule(node);
        return RowRule(node, /*keeps_axis0=*/false);
      case Rule::kFollow:
        return FollowRule(node);
      case Rule::kRow:
        return RowRule(node, false);
      case Rule::kWhole:
        return AllWhole(node);
      case Rule::kView:
        return ViewRule(node);
      case Rule::kSetRows:
        return SetRowsRule(node);
      case Rule::kFlashAttn:
        return FlashAttnRule(node);
      case Rule::kNone:
        break;
    }
    return absl::UnimplementedError("no tensor-parallel rule for the op");
  }

  absl::Status MulMatRule(Tensor* node) {
    Tensor* a = node->src[0];
    Tensor* b = node->src[1];
    TESSERA_ASSIGN_OR_RETURN(Placed * pa_ptr, Get(a));
    Placed pa = *pa_ptr;
    if (pa.state.axis == SplitAxis::kPartial) {
      TESSERA_ASSIGN_OR_RETURN(pa, Whole(a));
    }
    TESSERA_ASSIGN_OR_RETURN(Placed * pb_ptr, Get(b));
    Placed pb = *pb_ptr;
    const SplitState& sa = pa.state;
    const SplitState& sb = pb.state;
    if (sa.is_split() && sa.axis_index() == 1) {
      // Column parallel: a's rows are the output's axis 0.
      TESSERA_ASSIGN_OR_RETURN(Placed wb, Whole(b));
      SplitState out = sa;
      out.axis = SplitAxis::kAxis0;
      return Clone(node, out, {pa.m, wb.m});
    }
    if (sa.is_split() && sa.axis_index() == 0) {
      // Row parallel: partial sums over the reduced axis.
      if (sb.is_split() && sb.SameSlices(sa)) {
        return Clone(node, SplitState::Partial(), {pa.m, pb.m});
      }
      TESSERA_ASSIGN_OR_RETURN(Placed wb, Whole(b));
      TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> bs, SliceLike(wb, *b, sa));
      return Clone(node, SplitState::Partial(), {pa.m, bs});
    }
    if (sa.is_split()) {
      // Heads (axis 2 or 3): b split alike, or whole and sliced to match.
      const int d = sa.axis_index();
      const int64_t r = b->ne[d] / a->ne[d];
      const SplitState want = Scaled(sa, r);
      if (sb.is_split() && sb.axis == sa.axis && sb.SameSlices(want)) {
        return Clone(node, sb, {pa.m, pb.m});
      }
      if (sb.axis == SplitAxis::kMirrored && want.n_segments == 1) {
        TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> bs,
                                 SliceLike(pb, *b, want));
        return Clone(node, want, {pa.m, bs});
      }
      return AllWhole(node);
    }
    // a whole.
    if (sb.axis == SplitAxis::kPartial) {
      return Clone(node, SplitState::Partial(), {pa.m, pb.m});
    }
    if (sb.is_split() && sb.axis_index() == 0) {
      // A quantized a is sliced on whole blocks only; else b is gathered.
      const int64_t block = Traits(a->type).block_size;
      bool on_blocks = true;
      for (int64_t l : sb.lengths) on_blocks &= l % block == 0;
      if (!on_blocks) return AllWhole(node);
      TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> as, SliceLike(pa, *a, sb));
      return Clone(node, SplitState::Partial(), {as, pb.m});
    }
    if (sb.is_split() && sb.axis_index() == 1) {
      return Clone(node, sb, {pa.m, pb.m});
    }
    if (sb.is_split()) {
      const int d = sb.axis_index();
      if (a->ne[d] == 1) return Clone(node, sb, {pa.m, pb.m});
      const int64_t r = b->ne[d] / a->ne[d];
      // Each member's b heads must map onto whole a heads.
      bool whole_groups = true;
      for (int64_t l : sb.lengths) whole_groups &= l % r == 0;
      if (whole_groups && sb.n_segments == 1) {
        SplitState sa_want = sb;
        for (int64_t& l : sa_want.lengths) l /= r;
        TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> as,
                                 SliceLike(pa, *a, sa_want));
        return Clone(node, sb, {as, pb.m});
      }
    }
    return AllWhole(node);
  }

  // SET_ROWS writes rows of its destination (the node's view source, e.g.
  // a KV cache) in place, so the node keeps the destination's state: whole,
  // every member writes the whole rows; split on an axis other than the
  // row axis 1 (a KV cache split by heads on axis 0), each member writes its
  // slice of the rows, from b split alike or sliced to match.
  absl::Status SetRowsRule(Tensor* node) {
    TESSERA_RETURN_IF_ERROR(SetRowsClone(node));
    return ViewsOfDestination(node);
  }

  // SetRowsRule's member nodes, without their view sources.
  absl::Status SetRowsClone(Tensor* node) {
    Tensor* dst = node->view_src;
    Tensor* b = node->src[0];
    Tensor* c = node->src[1];
    if (dst == nullptr) {
      return absl::InvalidArgumentError("the result is not a view");
    }
    TESSERA_ASSIGN_OR_RETURN(Placed * pd, Get(dst));
    const SplitState sd = pd->state;
    TESSERA_ASSIGN_OR_RETURN(Placed wc, Whole(c));
    if (sd.axis == SplitAxis::kMirrored) {
      TESSERA_ASSIGN_OR_RETURN(Placed wb, Whole(b));
      return Clone(node, sd, {wb.m, wc.m});
    }
    // Written whole, in place: the node must be the whole destination.
    const bool whole_dst = node->view_offs == 0 && SameShape(*node, *dst) &&
                           node->IsContiguous() && dst->IsContiguous();
    const int d = sd.is_split() ? sd.axis_index() : -1;
    // A split on heads (axis 2, 3) keeps row indices only where c does not
    // vary along that axis.
    const bool indices_fit = (d == 0) || (d == 2 && c->ne[1] == 1) ||
                             (d == 3 && c->ne[2] == 1);
    if (sd.axis == SplitAxis::kPartial || !whole_dst || !indices_fit) {
      // No split write: the destination becomes whole in place first.
      TESSERA_RETURN_IF_ERROR(WholeInPlace(dst));
      TESSERA_ASSIGN_OR_RETURN(Placed wb, Whole(b));
      return Clone(node, SplitState::Mirrored(), {wb.m, wc.m});
    }
    // Rows written in place make a gathered copy stale.
    whole_.erase(dst);
    TESSERA_ASSIGN_OR_RETURN(Placed * pb_ptr, Get(b));
    Placed pb = *pb_ptr;
    if (pb.state.is_split() && pb.state.SameSlices(sd) &&
        b->IsContiguous()) {
      return Clone(node, sd, {pb.m, wc.m});
    }
    TESSERA_ASSIGN_OR_RETURN(Placed wb, Whole(b));
    TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> bs, SliceLike(wb, *b, sd));
    return Clone(node, sd, {bs, wc.m});
  }

  // Makes each member node of `node`, a SET_ROWS, a view of its member
  // destination, as SET_ROWS results are (a graph sent to a daemon must say
  // which tensor it writes).
  absl::Status ViewsOfDestination(Tensor* node) {
    TESSERA_ASSIGN_OR_RETURN(Placed * pd, Get(node->view_src));
    const Placed& pn = placed_.at(node);
    for (int i = 0; i < n_; ++i) {
      Tensor* root =
          pd->m[i]->view_src != nullptr ? pd->m[i]->view_src : pd->m[i];
      const char* at = static_cast<const char*>(pn.m[i]->data);
      const char* base = static_cast<const char*>(root->data);
      if (pn.m[i]->buffer != root->buffer || at < base ||
          static_cast<size_t>(at - base) + pn.m[i]->NumBytes() >
              root->NumBytes()) {
        return absl::InternalError(
            absl::StrCat("member ", i, " of SET_ROWS ", Describe(*node),
                         " does not lie inside its destination"));
      }
      pn.m[i]->view_src = root;
      pn.m[i]->view_offs = static_cast<size_t>(at - base);
    }
    return absl::OkStatus();
  }

  // Turns `t` (placed, not a view) MIRRORED where it lies: PARTIAL is
  // all-reduced in place; a split is gathered and the whole copied over the
  // member's slice (every member buffer is as large as the meta buffer).
  absl::Status WholeInPlace(Tensor* t) {
    TESSERA_ASSIGN_OR_RETURN(Placed * p, Get(t));
    if (p->state.axis == SplitAxis::kMirrored) return absl::OkStatus();
    if (p->state.axis == SplitAxis::kPartial) return AllReduce(*p);
    TESSERA_ASSIGN_OR_RETURN(Placed w, Whole(t));
    TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> m,
                             AtMeta(t, SplitState::Mirrored()));
    for (int i = 0; i < n_; ++i) {
      TESSERA_ASSIGN_OR_RETURN(Tensor * cpy, Cpy(plan_.ctx, w.m[i], m[i]));
      views_.push_back(cpy);
      Emit(i, cpy);
    }
    whole_.erase(t);
    *p = Placed{SplitState::Mirrored(), std::move(m)};
    return absl::OkStatus();
  }

  // FLASH_ATTN_EXT(q, k, v, mask): q split on its heads (axis 2) in whole
  // groups of the GQA ratio r = q heads / KV heads -> the result split on
  // its head axis 1 alike; k and v split on their heads as q's divided by
  // r (or whole, sliced to match); the mask whole (broadcast over heads).
  // ALiBi slopes depend on the global head index: computed whole.
  absl::Status FlashAttnRule(Tensor* node) {
    Tensor* q = node->src[0];
    Tensor* k = node->src[1];
    Tensor* v = node->src[2];
    Tensor* mask = node->src[3];
    TESSERA_ASSIGN_OR_RETURN(Placed * pq_ptr, Get(q));
    const SplitState sq = pq_ptr->state;
    const int64_t r = q->ne[2] / k->ne[2];
    // One KV head serves every query head: any head split of q reads it
    // whole.
    const bool one_kv = k->ne[2] == 1 && v->ne[2] == 1;
    bool fits = sq.is_split() && sq.axis_index() == 2 &&
                sq.n_segments == 1 && node->param<float>(1) == 0.0f &&
                (mask == nullptr || mask->ne[2] == 1);
    for (int64_t l : sq.lengths) fits = fits && (one_kv || l % r == 0);
    if (!fits) return AllWhole(node);
    const Placed pq = *pq_ptr;
    SplitState kv_want = sq;
    for (int64_t& l : kv_want.lengths) l /= r;
    auto heads = [&](Tensor* t) -> absl::StatusOr<std::vector<Tensor*>> {
      if (one_kv) {
        TESSERA_ASSIGN_OR_RETURN(Placed w, Whole(t));
        return w.m;
      }
      TESSERA_ASSIGN_OR_RETURN(Placed * p, Get(t));
      if (p->state.SameSlices(kv_want)) return p->m;
      TESSERA_ASSIGN_OR_RETURN(Placed w, Whole(t));
      return SliceLike(w, *t, kv_want);
    };
    TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> ks, heads(k));
    TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> vs, heads(v));
    std::vector<std::vector<Tensor*>> srcs = {pq.m, ks, vs};
    if (mask != nullptr) {
      TESSERA_ASSIGN_OR_RETURN(Placed wm, Whole(mask));
      srcs.push_back(wm.m);
    }
    SplitState out = sq;
    out.axis = SplitAxis::kAxis1;
    return Clone(node, out, srcs);
  }

  absl::Status BinaryRule(Tensor* node) {
    Tensor* a = node->src[0];
    Tensor* b = node->src[1];
    TESSERA_ASSIGN_OR_RETURN(Placed * pa_ptr, Get(a));
    Placed pa = *pa_ptr;
    TESSERA_ASSIGN_OR_RETURN(Placed * pb_ptr, Get(b));
    Placed pb = *pb_ptr;
    const bool pa_partial = pa.state.axis == SplitAxis::kPartial;
    const bool pb_partial = pb.state.axis == SplitAxis::kPartial;
    if ((node->op == Op::kAdd || node->op == Op::kSub) && pa_partial &&
        pb_partial && SameShape(*a, *b)) {
      return Clone(node, SplitState::Partial(), {pa.m, pb.m});
    }
    if ((node->op == Op::kMul || node->op == Op::kDiv) && pa_partial &&
        pb.state.axis == SplitAxis::kMirrored) {
      return Clone(node, SplitState::Partial(), {pa.m, pb.m});
    }
    if (pa_partial) {
      TESSERA_ASSIGN_OR_RETURN(pa, Whole(a));
    }
    if (pb_partial) {
      TESSERA_ASSIGN_OR_RETURN(pb, Whole(b));
    }
    if (pa.state.is_split()) {
      const int d = pa.state.axis_index();
      if (pb.state.is_split() &&
          !(b->ne[d] == a->ne[d] && pb.state.SameSlices(pa.state))) {
        TESSERA_ASSIGN_OR_RETURN(pb, Whole(b));
      }
      if (pb.state.is_split()) return Clone(node, pa.state, {pa.m, pb.m});
      if (b->ne[d] == 1) return Clone(node, pa.state, {pa.m, pb.m});
      if (b->ne[d] == a->ne[d] && pa.state.n_segments == 1) {
        TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> bs,
                                 SliceLike(pb, *b, pa.state));
        return Clone(node, pa.state, {pa.m, bs});
      }
      return AllWhole(node);
    }
    if (pb.state.is_split()) {
      const int d = pb.state.axis_index();
      if (b->ne[d] == a->ne[d] && pb.state.n_segments == 1) {
        TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> as,
                                 SliceLike(pa, *a, pb.state));
        return Clone(node, pb.state, {as, pb.m});
      }
      return AllWhole(node);
    }
    return Clone(node, SplitState::Mirrored(), {pa.m, pb.m});
  }

  absl::Status FollowRule(Tensor* node) {
    Tensor* a = node->src[0];
    TESSERA_ASSIGN_OR_RETURN(Placed * pa_ptr, Get(a));
    Placed pa = *pa_ptr;
    if (pa.state.axis == SplitAxis::kPartial) {
      const bool linear =
          (node->op == Op::kScale && node->param<float>(1) == 0.0f) ||
          (node->op == Op::kUnary &&
           node->param<UnaryOp>(0) == UnaryOp::kNeg) ||
          node->op == Op::kCont || node->op == Op::kDup;
      if (!linear || !a->IsContiguous()) {
        TESSERA_ASSIGN_OR_RETURN(pa, Whole(a));
      }
    }
    if (pa.state.is_split() && !SameShape(*a, *node)) return AllWhole(node);
    return Clone(node, pa.state, {pa.m});
  }

  absl::Status RowRule(Tensor* node, bool keeps_axis0) {
    Tensor* a = node->src[0];
    TESSERA_ASSIGN_OR_RETURN(Placed * pa_ptr, Get(a));
    Placed pa = *pa_ptr;
    const SplitState& s = pa.state;
    bool keep = s.is_split() && (keeps_axis0 || s.axis_index() != 0);
    if (node->op == Op::kRope) keep = keep && s.axis_index() == 1;
    if (node->op == Op::kSoftMax && keep && s.axis_index() == 2 &&
        node->param<float>(1) != 0.0f) {
      keep = false;  // ALiBi slopes depend on the global head index
    }
    if (!keep) return AllWhole(node);
    const int d = s.axis_index();
    std::vector<std::vector<Tensor*>> srcs = {pa.m};
    if (Tensor* other = node->src[1]; other != nullptr) {
      TESSERA_ASSIGN_OR_RETURN(Placed w, Whole(other));
      if (node->op == Op::kRope || other->ne[d] == 1) {
        srcs.push_back(w.m);
      } else if (node->op == Op::kSoftMax &&
                 (d == 1 ? other->ne[1] >= a->ne[1]
                         : other->ne[d] == a->ne[d]) &&
                 s.n_segments == 1) {
        // Slice the mask's rows or heads like a.
        Tensor shape = *other;
        shape.ne[d] = a->ne[d];
        TESSERA_ASSIGN_OR_RETURN(std::vector<Tensor*> ms,
                                 SliceLike(w, shape, s));
        srcs.push_back(ms);
      } else {
        return AllWhole(node);
      }
    }
    if (Tensor* factors = node->src[2];
        node->op == Op::kRope && factors != nullptr) {
      // Frequency factors (per rotated pair, shared by every head): whole.
      TESSERA_ASSIGN_OR_RETURN(Placed w, Whole(factors));
      srcs.push_back(w.m);
    }
    return Clone(node, s, srcs);
  }

  // The split of RESHAPE `node` of contiguous `src` split by `s`, when the
  // split axis survives: a node axis e holds the split axis merged with
  // whole inner axes, or a part of it whose every slice is whole.
  std::optional<SplitState> ReshapedSplit(const Tensor& src,
                                          const SplitState& s,
                                          const Tensor& node) {
    const int d = s.axis_index();
    int64_t inner = 1, outer = 1;
    for (int k = 0; k < d; ++k) inner *= src.ne[k];
    for (int k = d + 1; k < kMaxDims; ++k) outer *= src.ne[k];
    int64_t before = 1;
    for (int e = 0; e < kMaxDims; ++e) {
      int64_t after = 1;
      for (int k = e + 1; k < kMaxDims; ++k) after *= node.ne[k];
      if (after == outer && before * node.ne[e] == inner * src.ne[d]) {
        SplitState out = s;
        out.axis = static_cast<SplitAxis>(e);
        if (before <= inner && inner % before == 0) {
          for (int64_t& l : out.lengths) l *= inner / before;
          return out;
        }
        if (before % inner == 0) {
          const int64_t f = before / inner;
          for (int64_t& l : out.lengths) {
            if (l % f != 0) return std::nullopt;
            l /= f;
          }
          return out;
        }
        return std::nullopt;
      }
      before *= node.ne[e];
    }
    return std::nullopt;
  }

  absl::Status ViewRule(Tensor* node) {
    // A split survives PERMUTE, and RESHAPE where ReshapedSplit finds it.
    Tensor* a = node->src[0];
    TESSERA_ASSIGN_OR_RETURN(Placed * pa_ptr, Get(a));
    const Placed pa = *pa_ptr;
    if (pa.state.is_split() && node->op == Op::kPermute) {
      SplitState out = pa.state;
      out.axis = static_cast<SplitAxis>(node->op_params[pa.state.axis_index()]);
      Placed p{out, std::vector<Tensor*>(n_)};
      for (int i = 0; i < n_; ++i) {
        TESSERA_ASSIGN_OR_RETURN(
            p.m[i],
            Permute(plan_.ctx, pa.m[i], node->op_params[0], node->op_params[1],
                    node->op_params[2], node->op_params[3]));
        Adopt(i, p.m[i]);
      }
      placed_[node] = std::move(p);
      return absl::OkStatus();
    }
    // A VIEW that only reshapes its source (the same bytes, contiguous) is
    // a RESHAPE: the KV cache seen as [head_dim, heads, n_ctx].
    const size_t a_offs = a->view_src != nullptr ? a->view_offs : 0;
    const Tensor* a_root = a->view_src != nullptr ? a->view_src : a;
    const bool reshapes =
        node->op == Op::kReshape ||
        (node->op == Op::kView && node->view_src == a_root &&
         node->view_offs == a_offs && node->IsContiguous() &&
         node->NumElements() == a->NumElements());
    if (pa.state.is_split() && reshapes && a->IsContiguous()) {
      if (std::optional<SplitState> out = ReshapedSplit(*a, pa.state, *node)) {
        Placed p{*out, std::vector<Tensor*>(n_)};
        for (int i = 0; i < n_; ++i) {
          if (!pa.m[i]->IsContiguous()) return AllWholeView(node);
          int64_t ne[kMaxDims];
          MemberShape(*node, *out, i, ne);
          TESSERA_ASSIGN_OR_RETURN(
              p.m[i],
              Reshape(plan_.ctx, pa.m[i], {ne[0], ne[1], ne[2], ne[3]}));
          Adopt(i, p.m[i]);
        }
        placed_[node] = std::move(p);
        return absl::OkStatus();
      }
    }
    return AllWholeView(node);
  }

  absl::Status AllWholeView(Tensor* node) {
    // A view of the whole tensor.
    Tensor* root = node->view_src != nullptr ? node->view_src : node->src[0];
    TESSERA_RETURN_IF_ERROR(Whole(node->src[0]).status());
    TESSERA_ASSIGN_OR_RETURN(Placed w, Whole(root));
    Placed p{SplitState::Mirrored(), std::vector<Tensor*>(n_)};
    for (int i = 0; i < n_; ++i) p.m[i] = MemberView(*node, w.m[i]);
    placed_[node] = std::move(p);
    return absl::OkStatus();
  }

  // Allocates scratch and gives every new tensor its data.
  absl::Status Finish() {
    // A member whose scratch tensors are all empty still gets a (1-byte)
    // buffer for them to point into.
    std::vector<bool> needed(n_, false);
    for (const ScratchTensor& s : scratch_tensors_) needed[s.member] = true;
    std::vector<Buffer*> buffers(n_, nullptr);
    for (int i = 0; i < n_; ++i) {
      if (!needed[i] && scratch_[i] == 0) continue;
      TESSERA_ASSIGN_OR_RETURN(
          std::unique_ptr<Buffer> b,
          device_.member(i).buffer_type().Alloc(
              std::max<size_t>(scratch_[i], 1)));
      b->set_usage(BufferUsage::kCompute);
      buffers[i] = b.get();
      plan_.scratch.push_back(std::move(b));
    }
    for (const ScratchTensor& s : scratch_tensors_) {
      s.tensor->buffer = buffers[s.member];
      s.tensor->data = static_cast<char*>(buffers[s.member]->base()) + s.offset;
    }
    for (Tensor* v : views_) TESSERA_RETURN_IF_ERROR(InitView(*v));
    plan_.zeros.shrink_to_fit();
    return absl::OkStatus();
  }

  struct ScratchTensor {
    Tensor* tensor;
    int member;
    size_t offset;
  };

  MetaDevice& device_;
  const int n_;
  TpPlan& plan_;
  // Node-based: Get hands out pointers that later inserts must not move.
  absl::node_hash_map<const Tensor*, Placed> placed_;
  absl::flat_hash_map<const Tensor*, Placed> whole_;
  absl::flat_hash_set<const Tensor*> in_meta_;
  std::vector<std::unique_ptr<Graph>> open_;
  std::vector<size_t> scratch_;
  std::vector<ScratchTensor> scratch_tensors_;
  std::vector<Tensor*> views_;
};

}  // namespace

bool HasSplitRule(const Tensor& node) {
  return RuleOf(node.op) != Rule::kNone;
}

std::vector<const void*> Fingerprint(const Graph& graph) {
  std::vector<const void*> f;
  for (const Tensor* node : graph.nodes()) {
    f.push_back(node);
    f.push_back(node->data);
    for (const Tensor* s : node->src) {
      if (s == nullptr) continue;
      f.push_back(s);
      f.push_back(s->data);
    }
  }
  return f;
}

absl::StatusOr<std::unique_ptr<TpPlan>> DerivePlan(MetaDevice& device,
                                                   const Graph& graph) {
  auto plan = std::make_unique<TpPlan>();
  plan->fingerprint = Fingerprint(graph);
  Deriver deriver(device, *plan);
  TESSERA_RETURN_IF_ERROR(deriver.Run(graph));
  return plan;
}

}  // namespace tessera
