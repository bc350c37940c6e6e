#include "tests/conformance/cases.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/ops.h"
#include "graph/type.h"
#include "base/status_macros.h"

namespace tessera::conformance {

double NmseForType(Type type) {
  switch (type) {
    case Type::kF16:
      return kNmseF16;
    case Type::kBF16:
      return kNmseBF16;
    case Type::kQ8_0:
      return kNmseQ8_0Out;
    case Type::kQ4_0:
    case Type::kQ4_1:
    case Type::kQ5_0:
    case Type::kQ5_1:
      return kNmseQ4_0Out;
    case Type::kQ2_K:
    case Type::kQ3_K:
    case Type::kQ4_K:
    case Type::kQ5_K:
    case Type::kQ6_K:
      return kNmseKQuantOut;
    case Type::kF32:
    case Type::kI32:
    case Type::kI64:
      break;
  }
  return kNmseF32;
}

std::string SanitizedName(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) {
      out.push_back(c);
    } else if (!out.empty() && out.back() != '_') {
      out.push_back('_');
    }
  }
  if (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

namespace {

constexpr Type kF32 = Type::kF32;
constexpr Type kF16 = Type::kF16;
constexpr Type kBF16 = Type::kBF16;
constexpr Type kI32 = Type::kI32;
constexpr Type kI64 = Type::kI64;
constexpr Type kQ8_0 = Type::kQ8_0;
constexpr Type kQ4_0 = Type::kQ4_0;
constexpr Type kQ4_1 = Type::kQ4_1;
constexpr Type kQ5_0 = Type::kQ5_0;
constexpr Type kQ5_1 = Type::kQ5_1;
constexpr Type kQ2_K = Type::kQ2_K;
constexpr Type kQ3_K = Type::kQ3_K;
constexpr Type kQ4_K = Type::kQ4_K;
constexpr Type kQ5_K = Type::kQ5_K;
constexpr Type kQ6_K = Type::kQ6_K;

using Shape = std::array<int64_t, kMaxDims>;
using Build = std::function<absl::StatusOr<Tensor*>(Context&)>;
using OneInputOp = std::function<absl::StatusOr<Tensor*>(Context&, Tensor*)>;
using TwoInputOp =
    std::function<absl::StatusOr<Tensor*>(Context&, Tensor*, Tensor*)>;

// How an input of a given logical shape is laid out in memory.
enum class Layout {
  kContiguous,
  // Dims 1 and 2 swapped in memory (ggml_permute(x, 0, 2, 1, 3)): rows are
  // contiguous but not packed in order.
  kPermuted,
  // Dims 0 and 1 swapped in memory (ggml_transpose): elements of a row are
  // strided. Not for block types.
  kTransposed,
  // A VIEW into a tensor whose rows are longer by one block (3 values for
  // scalar types), starting that far into it: rows strided, non-zero offset.
  kStrided,
};

std::string LayoutSuffix(Layout layout) {
  switch (layout) {
    case Layout::kContiguous:
      return "";
    case Layout::kPermuted:
      return " perm";
    case Layout::kTransposed:
      return " transp";
    case Layout::kStrided:
      return " strided";
  }
  return "";
}

std::string TypeStr(Type type) {
  return absl::AsciiStrToLower(std::string(TypeName(type)));
}

// "10x5x4x3"; trailing 1s dropped ("7x5" for [7, 5, 1, 1]).
std::string Dims(const Shape& ne) {
  int n = kMaxDims;
  while (n > 1 && ne[n - 1] == 1) --n;
  return absl::StrJoin(ne.begin(), ne.begin() + n, "x");
}

// "f16 10x5x4x3 perm".
std::string Operand(Type type, const Shape& ne,
                    Layout layout = Layout::kContiguous) {
  return absl::StrCat(TypeStr(type), " ", Dims(ne), LayoutSuffix(layout));
}

// An input leaf of logical shape `ne` seen through `layout`.
absl::StatusOr<Tensor*> Input(Context& ctx, Type type, const Shape& ne,
                              Layout layout = Layout::kContiguous) {
  switch (layout) {
    case Layout::kContiguous:
      return ctx.NewTensor(type, ne);
    case Layout::kPermuted: {
      TESSERA_ASSIGN_OR_RETURN(Tensor * leaf,
                            ctx.NewTensor(type, {ne[0], ne[2], ne[1], ne[3]}));
      return Permute(ctx, leaf, 0, 2, 1, 3);
    }
    case Layout::kTransposed: {
      TESSERA_ASSIGN_OR_RETURN(Tensor * leaf,
                            ctx.NewTensor(type, {ne[1], ne[0], ne[2], ne[3]}));
      return Transpose(ctx, leaf);
    }
    case Layout::kStrided: {
      const int64_t block = Traits(type).block_size;
      const int64_t pad = block == 1 ? 3 : block;
      TESSERA_ASSIGN_OR_RETURN(
          Tensor * leaf,
          ctx.NewTensor(type, {ne[0] + pad, ne[1], ne[2], ne[3]}));
      return View(ctx, leaf, ne, {leaf->nb[1], leaf->nb[2], leaf->nb[3]},
                  RowSize(type, pad));
    }
  }
  return absl::InvalidArgumentError("[Input] unknown layout");
}

Build WithInput(Type type, Shape ne, Layout layout, OneInputOp op) {
  return [=](Context& ctx) -> absl::StatusOr<Tensor*> {
    TESSERA_ASSIGN_OR_RETURN(Tensor * a, Input(ctx, type, ne, layout));
    return op(ctx, a);
  };
}

Build WithInputs(Type ta, Shape na, Layout la, Type tb, Shape nb, Layout lb,
                 TwoInputOp op) {
  return [=](Context& ctx) -> absl::StatusOr<Tensor*> {
    TESSERA_ASSIGN_OR_RETURN(Tensor * a, Input(ctx, ta, na, la));
    TESSERA_ASSIGN_OR_RETURN(Tensor * b, Input(ctx, tb, nb, lb));
    return op(ctx, a, b);
  };
}

class CaseList {
 public:
  void Add(std::string name, double max_nmse, Build build,
           float input_min = -1.0f, float input_max = 1.0f) {
    cases_.push_back(OpCase{std::move(name), std::move(build), max_nmse,
                            input_min, input_max});
  }
  std::vector<OpCase> Take() { return std::move(cases_); }

 private:
  std::vector<OpCase> cases_;
};

constexpr Layout kC = Layout::kContiguous;
constexpr Layout kP = Layout::kPermuted;
constexpr Layout kT = Layout::kTransposed;
constexpr Layout kS = Layout::kStrided;

// DUP, CONT, and the view ops seen through a following CONT.
void AddCopyCases(CaseList& cases) {
  for (Type t : {kF32, kF16, kBF16, kI32}) {
    for (Layout l : {kC, kP, kT}) {
      const Shape ne = {7, 5, 3, 2};
      cases.Add("DUP " + Operand(t, ne, l), NmseForType(t),
                WithInput(t, ne, l, Dup));
      if (l != kC) {
        cases.Add("CONT " + Operand(t, ne, l), NmseForType(t),
                  WithInput(t, ne, l, Cont));
      }
    }
  }
  for (Type t : {kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1}) {
    for (Layout l : {kC, kP, kS}) {
      const Shape ne = {64, 3, 5, 2};
      cases.Add("DUP " + Operand(t, ne, l), kNmseF32, WithInput(t, ne, l, Dup));
      if (l != kC) {
        cases.Add("CONT " + Operand(t, ne, l), kNmseF32,
                  WithInput(t, ne, l, Cont));
      }
    }
  }
  cases.Add("DUP f32 1", kNmseF32, WithInput(kF32, {1, 1, 1, 1}, kC, Dup));
  cases.Add("DUP f32 5x0x3", kNmseF32, WithInput(kF32, {5, 0, 3, 1}, kC, Dup));
  cases.Add("CONT f32 4x0x3 perm", kNmseF32,
            WithInput(kF32, {4, 0, 3, 1}, kP, Cont));
  cases.Add("CONT f32 1x7 transp", kNmseF32,
            WithInput(kF32, {1, 7, 1, 1}, kT, Cont));
  cases.Add("CONT f32 67x3x2 strided", kNmseF32,
            WithInput(kF32, {67, 3, 2, 1}, kS, Cont));
  // Into another shape (ggml_cont_2d): heads merged after attention, and a
  // quantized tensor's blocks regrouped.
  cases.Add("CONT f32 8x5x3 perm as 24x5", kNmseF32,
            WithInput(kF32, {8, 5, 3, 1}, kP, [](Context& ctx, Tensor* a) {
              return ContAs(ctx, a, {24, 5});
            }));
  cases.Add("CONT q8_0 64x3x2 as 128x3", kNmseF32,
            WithInput(kQ8_0, {64, 3, 2, 1}, kC, [](Context& ctx, Tensor* a) {
              return ContAs(ctx, a, {128, 3});
            }));

  // VIEW with its own strides and offset: every other row of a plane.
  cases.Add(
      "CONT VIEW f32 4x3x2 of 10x6x4", kNmseF32,
      [](Context& ctx) -> absl::StatusOr<Tensor*> {
        TESSERA_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(kF32, {10, 6, 4, 1}));
        TESSERA_ASSIGN_OR_RETURN(Tensor * v,
                              View(ctx, a, {4, 3, 2}, {2 * a->nb[1], a->nb[2]},
                                   2 * a->nb[0] + a->nb[1]));
        return Cont(ctx, v);
      });
  cases.Add("CONT VIEW f16 7 of 10x6", kNmseF16,
            [](Context& ctx) -> absl::StatusOr<Tensor*> {
              TESSERA_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(kF16, {10, 6}));
              TESSERA_ASSIGN_OR_RETURN(Tensor * v,
                                    View(ctx, a, {7}, {}, 5 * a->nb[0]));
              return Cont(ctx, v);
            });
  // A view of a computed node, not of a leaf.
  cases.Add(
      "CONT VIEW of ADD f32 6x5x3", kNmseF32,
      WithInputs(
          kF32, {6, 5, 3, 1}, kC, kF32, {6, 5, 3, 1}, kC,
          [](Context& ctx, Tensor* a, Tensor* b) -> absl::StatusOr<Tensor*> {
            TESSERA_ASSIGN_OR_RETURN(Tensor * s, Add(ctx, a, b));
            TESSERA_ASSIGN_OR_RETURN(Tensor * v,
                                  View(ctx, s, {3, 5, 2}, {s->nb[1], s->nb[2]},
                                       s->nb[0] + s->nb[2]));
            return Cont(ctx, v);
          }));
  for (Type t : {kF32, kF16}) {
    cases.Add("CONT PERMUTE 2031 " + Operand(t, {3, 4, 5, 6}), NmseForType(t),
              WithInput(t, {3, 4, 5, 6}, kC,
                        [](Context& ctx, Tensor* a) -> absl::StatusOr<Tensor*> {
                          TESSERA_ASSIGN_OR_RETURN(Tensor * p,
                                                Permute(ctx, a, 2, 0, 3, 1));
                          return Cont(ctx, p);
                        }));
  }
  cases.Add("CONT PERMUTE 0321 q8_0 32x3x4x2", kNmseF32,
            WithInput(kQ8_0, {32, 3, 4, 2}, kC,
                      [](Context& ctx, Tensor* a) -> absl::StatusOr<Tensor*> {
                        TESSERA_ASSIGN_OR_RETURN(Tensor * p,
                                              Permute(ctx, a, 0, 3, 2, 1));
                        return Cont(ctx, p);
                      }));
  cases.Add(
      "CONT RESHAPE TRANSPOSE f32 12x5x2 as 10x6x2", kNmseF32,
      WithInput(
          kF32, {12, 5, 2, 1}, kC,
          [](Context& ctx, Tensor* a) -> absl::StatusOr<Tensor*> {
            TESSERA_ASSIGN_OR_RETURN(Tensor * r, Reshape(ctx, a, {10, 6, 2}));
            TESSERA_ASSIGN_OR_RETURN(Tensor * t, Transpose(ctx, r));
            return Cont(ctx, t);
          }));
  cases.Add("CONT TRANSPOSE of SCALE f32 33x7", kNmseF32,
            WithInput(kF32, {33, 7, 1, 1}, kC,
                      [](Context& ctx, Tensor* a) -> absl::StatusOr<Tensor*> {
                        TESSERA_ASSIGN_OR_RETURN(Tensor * s, Scale(ctx, a, 2.0f));
                        TESSERA_ASSIGN_OR_RETURN(Tensor * t, Transpose(ctx, s));
                        return Cont(ctx, t);
                      }));
  cases.Add(
      "SCALE RESHAPE of SQR f32 12x5 as 6x10", kNmseF32,
      WithInput(kF32, {12, 5, 1, 1}, kC,
                [](Context& ctx, Tensor* a) -> absl::StatusOr<Tensor*> {
                  TESSERA_ASSIGN_OR_RETURN(Tensor * s, Sqr(ctx, a));
                  TESSERA_ASSIGN_OR_RETURN(Tensor * r, Reshape(ctx, s, {6, 10}));
                  return Scale(ctx, r, -3.0f);
                }));
}

// CPY between types, including quantizing and dequantizing.
void AddCpyCases(CaseList& cases) {
  struct Pair {
    Type src, dst;
  };
  const Pair pairs[] = {
      {kF32, kF32},  {kF32, kF16},  {kF32, kBF16},  {kF32, kQ8_0},
      {kF32, kQ4_0}, {kF16, kF32},  {kF16, kF16},   {kF16, kBF16},
      {kBF16, kF32}, {kBF16, kF16}, {kBF16, kBF16}, {kQ8_0, kF32},
      {kQ4_0, kF32}, {kF32, kQ4_1}, {kF32, kQ5_0},  {kF32, kQ5_1},
      {kQ4_1, kF32}, {kQ5_0, kF32}, {kQ5_1, kF32},
  };
  for (const Pair& p : pairs) {
    const bool quantized =
        Traits(p.src).is_quantized || Traits(p.dst).is_quantized;
    // Quantizing is compared on dequantized values; dequantizing is exact.
    const double nmse =
        Traits(p.dst).is_quantized
            ? NmseForType(p.dst)
            : std::max(
                  Traits(p.src).is_quantized ? kNmseF32 : NmseForType(p.src),
                  NmseForType(p.dst));
    std::vector<std::pair<Shape, Layout>> shapes = {{{64, 5, 3, 1}, kC},
                                                    {{64, 5, 3, 2}, kP}};
    if (!quantized) {
      shapes.push_back({{7, 5, 3, 2}, kT});
      shapes.push_back({{33, 3, 1, 1}, kC});
    }
    for (const auto& [ne, layout] : shapes) {
      cases.Add(absl::StrCat("CPY ", Operand(p.src, ne, layout), " -> ",
                             TypeStr(p.dst)),
                nmse,
                WithInputs(p.src, ne, layout, p.dst, ne, kC,
                           [](Context& ctx, Tensor* a, Tensor* b) {
                             return Cpy(ctx, a, b);
                           }));
    }
  }
  // Same element count, different shape.
  cases.Add("CPY f32 6x4 -> f32 8x3", kNmseF32,
            WithInputs(kF32, {6, 4, 1, 1}, kC, kF32, {8, 3, 1, 1}, kC,
                       [](Context& ctx, Tensor* a, Tensor* b) {
                         return Cpy(ctx, a, b);
                       }));
  cases.Add("CPY f32 0x3 -> f16 0x3", kNmseF16,
            WithInputs(kF32, {0, 3, 1, 1}, kC, kF16, {0, 3, 1, 1}, kC,
                       [](Context& ctx, Tensor* a, Tensor* b) {
                         return Cpy(ctx, a, b);
                       }));
  // Writing rows 3..6 of a cache (the KV-cache store pattern): the
  // destination is a view with an offset.
  for (Type t : {kF16, kQ8_0}) {
    cases.Add(
        absl::StrCat("CPY f32 64x4 -> VIEW rows 3-6 of ", TypeStr(t), " 64x10"),
        NmseForType(t),
        WithInputs(kF32, {64, 4, 1, 1}, kC, t, {64, 10, 1, 1}, kC,
                   [](Context& ctx, Tensor* a,
                      Tensor* cache) -> absl::StatusOr<Tensor*> {
                     TESSERA_ASSIGN_OR_RETURN(
                         Tensor * rows, View(ctx, cache, {64, 4},
                                             {cache->nb[1]}, 3 * cache->nb[1]));
                     return Cpy(ctx, a, rows);
                   }));
  }
}

// ADD, SUB, MUL, DIV with broadcasting and mixed types.
void AddBinaryCases(CaseList& cases) {
  struct BinaryOp {
    std::string_view name;
    absl::StatusOr<Tensor*> (*fn)(Context&, Tensor*, Tensor*);
    float input_min, input_max;
  };
  // DIV's inputs stay away from 0.
  const BinaryOp ops[] = {{"ADD", Add, -1.0f, 1.0f},
                          {"SUB", Sub, -1.0f, 1.0f},
                          {"MUL", Mul, -1.0f, 1.0f},
                          {"DIV", Div, 0.5f, 2.0f}};
  struct Shapes {
    Shape a, b;
    Layout la, lb;
  };
  const Shapes common[] = {
      {{10, 5, 4, 3}, {10, 5, 4, 3}, kC, kC},
      {{10, 5, 4, 3}, {10, 1, 1, 1}, kC, kC},
      {{10, 5, 4, 3}, {1, 5, 1, 3}, kC, kC},
      {{10, 5, 4, 3}, {10, 5, 4, 3}, kP, kP},
  };
  const Shapes f32_only[] = {
      {{1, 1, 1, 1}, {1, 1, 1, 1}, kC, kC},
      {{1, 7, 3, 1}, {1, 7, 1, 1}, kC, kC},
      {{67, 3, 2, 1}, {67, 1, 2, 1}, kS, kC},
      {{33, 3, 1, 1}, {33, 3, 1, 1}, kT, kC},
      {{33, 3, 1, 1}, {33, 3, 1, 1}, kC, kT},
      {{33, 0, 2, 1}, {33, 1, 1, 1}, kC, kC},
  };
  const std::pair<Type, Type> types[] = {
      {kF32, kF32}, {kF16, kF16}, {kF16, kF32}, {kBF16, kBF16}, {kBF16, kF32}};
  for (const BinaryOp& op : ops) {
    auto add = [&](Type ta, Type tb, const Shapes& s) {
      cases.Add(absl::StrCat(std::string(op.name), " ", Operand(ta, s.a, s.la),
                             " + ", Operand(tb, s.b, s.lb)),
                std::max(NmseForType(ta), NmseForType(tb)),
                WithInputs(ta, s.a, s.la, tb, s.b, s.lb, op.fn), op.input_min,
                op.input_max);
    };
    for (const auto& [ta, tb] : types) {
      for (const Shapes& s : common) add(ta, tb, s);
    }
    for (const Shapes& s : f32_only) add(kF32, kF32, s);
  }
}

// SCALE, SQR, SQRT, LOG, UNARY: one float input, same shape out.
void AddElementwiseCases(CaseList& cases) {
  struct Variant {
    Shape ne;
    Layout layout;
    bool all_types;
  };
  const Variant variants[] = {
      {{10, 5, 4, 3}, kC, true},  {{7, 5, 3, 2}, kP, true},
      {{33, 3, 1, 1}, kT, false}, {{1, 1, 1, 1}, kC, false},
      {{0, 3, 1, 1}, kC, false},
  };
  struct Fn {
    std::string name;
    OneInputOp op;
    double f32_nmse;
    float input_min, input_max;
  };
  std::vector<Fn> fns = {
      {"SCALE 0.5", [](Context& c, Tensor* a) { return Scale(c, a, 0.5f); },
       kNmseF32, -1.0f, 1.0f},
      {"SCALE -2 bias 0.25",
       [](Context& c, Tensor* a) { return Scale(c, a, -2.0f, 0.25f); },
       kNmseF32, -1.0f, 1.0f},
      {"SQR", Sqr, kNmseF32, -1.0f, 1.0f},
      {"SQRT", Sqrt, kNmseF32, 0.1f, 2.0f},
      {"LOG", Log, kNmseF32, 0.1f, 2.0f},
  };
  for (int u = 0; u < kUnaryOpCount; ++u) {
    const UnaryOp op = static_cast<UnaryOp>(u);
    fns.push_back({absl::StrCat("UNARY ", std::string(UnaryOpName(op))),
                   [op](Context& c, Tensor* a) { return Unary(c, a, op); },
                   op == UnaryOp::kGelu ? kNmseTranscendental : kNmseF32, -1.0f,
                   1.0f});
  }
  // The activations over both signs' saturating ranges.
  for (UnaryOp op : {UnaryOp::kSilu, UnaryOp::kGelu}) {
    fns.push_back(
        {absl::StrCat("UNARY ", std::string(UnaryOpName(op)), " wide"),
         [op](Context& c, Tensor* a) { return Unary(c, a, op); },
         op == UnaryOp::kGelu ? kNmseTranscendental : kNmseF32, -12.0f,
         12.0f});
  }
  for (const Fn& fn : fns) {
    for (const Variant& v : variants) {
      for (Type t : {kF32, kF16, kBF16}) {
        if (t != kF32 && !v.all_types) continue;
        cases.Add(absl::StrCat(fn.name, " ", Operand(t, v.ne, v.layout)),
                  std::max(fn.f32_nmse, NmseForType(t)),
                  WithInput(t, v.ne, v.layout, fn.op), fn.input_min,
                  fn.input_max);
      }
    }
  }
}

// GLU: split (plain and swapped) and with a separate gate, SwiGLU and GeGLU.
void AddGluCases(CaseList& cases) {
  for (int g = 0; g < kGluOpCount; ++g) {
    const GluOp op = static_cast<GluOp>(g);
    const std::string name = absl::StrCat("GLU ", std::string(GluOpName(op)));
    const double f32_nmse =
        op == GluOp::kGeGlu ? kNmseTranscendental : kNmseF32;
    struct Variant {
      Type type;
      Shape ne;  // of the output
      Layout layout;
    };
    const Variant variants[] = {
        {kF32, {10, 5, 3, 1}, kC},  {kF16, {10, 5, 3, 1}, kC},
        {kBF16, {10, 5, 3, 1}, kC}, {kF32, {1, 3, 1, 1}, kC},
        {kF32, {67, 3, 2, 1}, kC},  {kF32, {7, 5, 3, 2}, kP},
    };
    for (const Variant& v : variants) {
      const double nmse = std::max(f32_nmse, NmseForType(v.type));
      Shape split = v.ne;
      split[0] *= 2;
      for (bool swapped : {false, true}) {
        cases.Add(absl::StrCat(name, " split", swapped ? " swapped " : " ",
                               Operand(v.type, split, v.layout)),
                  nmse,
                  WithInput(v.type, split, v.layout,
                            [op, swapped](Context& c, Tensor* a) {
                              return GluSplit(c, a, op, swapped);
                            }));
      }
      cases.Add(
          absl::StrCat(name, " separate ", Operand(v.type, v.ne, v.layout)),
          nmse,
          WithInputs(v.type, v.ne, v.layout, v.type, v.ne, v.layout,
                     [op](Context& c, Tensor* a, Tensor* b) {
                       return Glu(c, a, b, op);
                     }));
    }
    // Rows longer than a vector, inputs over both signs' saturating
    // ranges.
    cases.Add(absl::StrCat(name, " split wide ", Operand(kF32, {200, 3})),
              f32_nmse,
              WithInput(kF32, {200, 3}, kC,
                        [op](Context& c, Tensor* a) {
                          return GluSplit(c, a, op, false);
                        }),
              -12.0f, 12.0f);
  }
}

// SUM_ROWS, MEAN, ARGMAX, ARGSORT, NORM, RMS_NORM, SOFT_MAX: per-row ops.
void AddRowCases(CaseList& cases) {
  const std::pair<Shape, Layout> reduce_shapes[] = {
      {{10, 5, 4, 3}, kC}, {{67, 3, 2, 1}, kC}, {{1, 7, 1, 1}, kC},
      {{33, 5, 3, 2}, kP}, {{7, 5, 3, 1}, kS},  {{5, 0, 1, 1}, kC},
  };
  for (const auto& [ne, l] : reduce_shapes) {
    cases.Add("SUM_ROWS " + Operand(kF32, ne, l), kNmseF32,
              WithInput(kF32, ne, l, SumRows));
    cases.Add("MEAN " + Operand(kF32, ne, l), kNmseF32,
              WithInput(kF32, ne, l, Mean));
  }
  // An empty row sums to 0 (its mean is undefined).
  cases.Add("SUM_ROWS f32 0x3", kNmseF32,
            WithInput(kF32, {0, 3, 1, 1}, kC, SumRows));

  for (const Shape& ne :
       {Shape{7, 5, 1, 1}, Shape{67, 3, 1, 1}, Shape{1, 4, 1, 1},
        Shape{33, 1, 1, 1}, Shape{256, 2, 1, 1}}) {
    cases.Add("ARGMAX " + Operand(kF32, ne), kNmseF32,
              WithInput(kF32, ne, kC, Argmax));
  }
  // Tied maxima: each row twice over, so its maximum appears at i and
  // n0 + i; the later one wins, as in ggml's CPU backend.
  for (const Shape& ne : {Shape{7, 5, 1, 1}, Shape{40, 3, 1, 1}}) {
    cases.Add("ARGMAX ties " + Operand(kF32, ne) + " twice", kNmseF32,
              WithInput(kF32, ne, kC,
                        [](Context& c, Tensor* a) -> absl::StatusOr<Tensor*> {
                          TESSERA_ASSIGN_OR_RETURN(Tensor * twice,
                                                   Concat(c, a, a, 0));
                          return Argmax(c, twice);
                        }));
  }

  const std::pair<Shape, Layout> sort_shapes[] = {
      {{16, 10, 1, 1}, kC}, {{67, 3, 2, 1}, kC}, {{1, 4, 1, 1}, kC},
      {{33, 2, 1, 1}, kC},  {{7, 5, 3, 1}, kS},
  };
  for (const auto& [ne, l] : sort_shapes) {
    for (SortOrder order : {SortOrder::kAscending, SortOrder::kDescending}) {
      cases.Add(absl::StrCat("ARGSORT ",
                             order == SortOrder::kAscending ? "asc " : "desc ",
                             Operand(kF32, ne, l)),
                kNmseF32,
                WithInput(kF32, ne, l, [order](Context& c, Tensor* a) {
                  return Argsort(c, a, order);
                }));
    }
  }

  struct NormVariant {
    Shape ne;
    Layout layout;
    float eps;
  };
  const NormVariant norms[] = {
      {{64, 5, 4, 3}, kC, 1e-6f}, {{67, 3, 1, 1}, kC, 1e-5f},
      {{1, 5, 1, 1}, kC, 1e-5f},  {{33, 5, 3, 2}, kP, 1e-5f},
      {{7, 5, 3, 1}, kS, 1e-5f},  {{8, 0, 1, 1}, kC, 1e-5f},
  };
  for (const NormVariant& n : norms) {
    const float eps = n.eps;
    const std::string suffix =
        absl::StrCat(" eps ", eps, " ", Operand(kF32, n.ne, n.layout));
    cases.Add("NORM" + suffix, kNmseF32,
              WithInput(kF32, n.ne, n.layout, [eps](Context& c, Tensor* a) {
                return Norm(c, a, eps);
              }));
    cases.Add("RMS_NORM" + suffix, kNmseF32,
              WithInput(kF32, n.ne, n.layout, [eps](Context& c, Tensor* a) {
                return RmsNorm(c, a, eps);
              }));
  }

  struct SoftMaxVariant {
    Shape ne;
    std::optional<Type> mask_type;
    Shape mask_ne;
    float scale, max_bias;
  };
  const SoftMaxVariant softmaxes[] = {
      {{16, 7, 4, 2}, std::nullopt, {}, 1.0f, 0.0f},
      {{16, 7, 4, 2}, kF32, {16, 7, 1, 1}, 0.125f, 0.0f},
      // A mask with more rows than a, broadcast over dims 2 and 3.
      {{16, 7, 4, 2}, kF16, {16, 9, 2, 2}, 1.0f, 0.0f},
      // ALiBi with 6 heads: heads 4 and 5 take the second slope series.
      {{33, 5, 6, 1}, kF32, {33, 5, 1, 1}, 1.0f, 8.0f},
      {{33, 5, 6, 1}, kF16, {33, 8, 1, 1}, 0.5f, 8.0f},
      {{67, 3, 1, 1}, std::nullopt, {}, 1.0f, 0.0f},
      {{1, 5, 1, 1}, std::nullopt, {}, 1.0f, 0.0f},
      {{1, 5, 1, 1}, kF32, {1, 5, 1, 1}, 2.0f, 0.0f},
      {{16, 0, 2, 1}, std::nullopt, {}, 1.0f, 0.0f},
  };
  for (const SoftMaxVariant& s : softmaxes) {
    std::string name = "SOFT_MAX " + Operand(kF32, s.ne);
    if (s.mask_type) {
      absl::StrAppend(&name, " mask ", Operand(*s.mask_type, s.mask_ne));
    }
    absl::StrAppend(&name, " scale ", s.scale);
    if (s.max_bias != 0.0f) absl::StrAppend(&name, " max_bias ", s.max_bias);
    cases.Add(name, s.mask_type ? NmseForType(*s.mask_type) : kNmseF32,
              [s](Context& ctx) -> absl::StatusOr<Tensor*> {
                TESSERA_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(kF32, s.ne));
                Tensor* mask = nullptr;
                if (s.mask_type) {
                  TESSERA_ASSIGN_OR_RETURN(mask,
                                        ctx.NewTensor(*s.mask_type, s.mask_ne));
                }
                return SoftMax(ctx, a, mask, s.scale, s.max_bias);
              });
  }
}

// MUL_MAT for every src0 type, with batches broadcast over dims 2 and 3.
void AddMulMatCases(CaseList& cases) {
  struct Variant {
    int64_t k, m, n;
    std::array<int64_t, 2> a_batch, b_batch;
    Layout la, lb;
    bool float_only;  // k is not a multiple of 32
  };
  const Variant variants[] = {
      {64, 16, 1, {1, 1}, {1, 1}, kC, kC, false},
      {64, 16, 9, {1, 1}, {1, 1}, kC, kC, false},
      // A quantized matrix-vector product: rows not a multiple of its
      // tiles, an odd block count.
      {96, 11, 1, {1, 1}, {1, 1}, kC, kC, false},
      // Blocks in steps of four and one at a time after them; the last
      // row's last step ending at the weights' end.
      {224, 11, 1, {1, 1}, {1, 1}, kC, kC, false},
      {128, 5, 1, {1, 1}, {1, 1}, kC, kC, false},
      {288, 6, 1, {1, 1}, {1, 1}, kC, kC, false},
      {64, 7, 5, {2, 3}, {2, 3}, kC, kC, false},
      {64, 7, 5, {2, 3}, {4, 6}, kC, kC, false},
      {64, 3, 4, {1, 1}, {3, 2}, kC, kC, false},
      {96, 5, 6, {3, 1}, {3, 1}, kC, kP, false},
      {64, 7, 5, {1, 1}, {1, 1}, kC, kT, false},
      {64, 4, 5, {3, 1}, {3, 1}, kP, kC, false},
      {64, 7, 3, {1, 1}, {1, 1}, kS, kC, false},
      {67, 7, 5, {1, 1}, {1, 1}, kC, kC, true},
      {1, 1, 1, {1, 1}, {1, 1}, kC, kC, true},
      {7, 33, 3, {2, 1}, {4, 1}, kC, kC, true},
      {33, 4, 5, {3, 1}, {3, 1}, kP, kP, true},
      {64, 7, 0, {1, 1}, {1, 1}, kC, kC, true},
      // Every column count of the float matrix-vector kernels, with rows
      // not a multiple of their tiles and k not a multiple of a vector.
      {1000, 9, 8, {1, 1}, {1, 1}, kC, kC, true},
      {133, 11, 2, {1, 1}, {1, 1}, kC, kC, true},
      {131, 6, 3, {1, 1}, {1, 1}, kC, kC, true},
      {96, 5, 4, {2, 1}, {4, 1}, kC, kC, false},
      {45, 13, 6, {1, 1}, {1, 1}, kC, kC, true},
      {160, 3, 7, {1, 1}, {1, 1}, kC, kP, false},
      // Enough columns for the tile products (kMinTileCols): rows and
      // columns not multiples of their tiles, broadcast batches, strided
      // columns, and k in several chunks (2048 values of 528 columns).
      {96, 37, 16, {1, 1}, {1, 1}, kC, kC, false},
      {64, 7, 33, {2, 3}, {4, 6}, kC, kC, false},
      {96, 5, 17, {3, 1}, {3, 1}, kC, kP, false},
      {2048, 20, 528, {1, 1}, {1, 1}, kC, kC, false},
  };
  for (Type t : {kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1}) {
    const double nmse =
        Traits(t).is_quantized ? kNmseMulMatQuantized : NmseForType(t);
    for (const Variant& v : variants) {
      if (v.float_only && Traits(t).is_quantized) continue;
      const Shape na = {v.k, v.m, v.a_batch[0], v.a_batch[1]};
      const Shape nb = {v.k, v.n, v.b_batch[0], v.b_batch[1]};
      cases.Add(absl::StrCat("MUL_MAT ", Operand(t, na, v.la), " * ",
                             Operand(kF32, nb, v.lb)),
                nmse, WithInputs(t, na, v.la, kF32, nb, v.lb, MulMat));
    }
  }
}

// GET_ROWS of every type and SET_ROWS into every storable type.
void AddRowIndexCases(CaseList& cases) {
  struct GetVariant {
    Shape a;  // [n0, rows, a2, a3]
    int64_t n;
    Layout layout;
  };
  const GetVariant scalar_gets[] = {
      {{7, 10, 1, 1}, 4, kC}, {{7, 10, 2, 3}, 5, kC}, {{1, 5, 1, 1}, 3, kC},
      {{7, 10, 1, 1}, 4, kS}, {{7, 10, 1, 1}, 0, kC},
  };
  const GetVariant block_gets[] = {{{64, 10, 2, 1}, 4, kC},
                                   {{32, 6, 1, 1}, 6, kS}};
  for (Type t : {kF32, kF16, kBF16, kI32, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1}) {
    const bool block = Traits(t).is_quantized;
    for (const GetVariant& v : block ? absl::MakeConstSpan(block_gets)
                                     : absl::MakeConstSpan(scalar_gets)) {
      const Shape idx = {v.n, v.a[2], v.a[3], 1};
      cases.Add(absl::StrCat("GET_ROWS ", Operand(t, v.a, v.layout), " at ",
                             Operand(kI32, idx)),
                kNmseF32, WithInputs(t, v.a, v.layout, kI32, idx, kC, GetRows));
    }
  }

  struct SetVariant {
    Shape a;  // destination [n0, rows, b2, b3]
    int64_t n;
    int64_t c1, c2;
    Layout lb;
  };
  const SetVariant sets[] = {
      {{64, 10, 2, 3}, 4, 2, 3, kC}, {{64, 10, 2, 3}, 4, 1, 1, kC},
      {{64, 6, 3, 1}, 6, 3, 1, kP},  {{7, 10, 2, 3}, 4, 2, 3, kC},
      {{1, 5, 1, 1}, 5, 1, 1, kC},   {{7, 10, 1, 1}, 0, 1, 1, kC},
  };
  for (Type t : {kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1}) {
    for (const SetVariant& v : sets) {
      if (Traits(t).is_quantized && v.a[0] % 32 != 0) continue;
      const Shape nb = {v.a[0], v.n, v.a[2], v.a[3]};
      const Shape nc = {v.n, v.c1, v.c2, 1};
      cases.Add(
          absl::StrCat("SET_ROWS ", Operand(t, v.a), " from ",
                       Operand(kF32, nb, v.lb), " at ", Operand(kI32, nc)),
          NmseForType(t),
          [t, v, nb, nc](Context& ctx) -> absl::StatusOr<Tensor*> {
            TESSERA_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(t, v.a));
            TESSERA_ASSIGN_OR_RETURN(Tensor * b, Input(ctx, kF32, nb, v.lb));
            TESSERA_ASSIGN_OR_RETURN(Tensor * c, ctx.NewTensor(kI32, nc));
            return SetRows(ctx, a, b, c);
          });
    }
  }
  // llama.cpp's KV cache writes: F16 rows, I64 indices.
  for (Type t : {kF32, kF16, kQ8_0}) {
    for (auto [bt, ct] : {std::pair{kF16, kI32}, {kF32, kI64}, {kF16, kI64}}) {
      for (const SetVariant& v : {sets[0], sets[2]}) {
        const Shape nb = {v.a[0], v.n, v.a[2], v.a[3]};
        const Shape nc = {v.n, v.c1, v.c2, 1};
        cases.Add(
            absl::StrCat("SET_ROWS ", Operand(t, v.a), " from ",
                         Operand(bt, nb, v.lb), " at ", Operand(ct, nc)),
            std::max(NmseForType(t), NmseForType(bt)),
            [t, bt, ct, v, nb, nc](Context& ctx) -> absl::StatusOr<Tensor*> {
              TESSERA_ASSIGN_OR_RETURN(Tensor * a, ctx.NewTensor(t, v.a));
              TESSERA_ASSIGN_OR_RETURN(Tensor * b, Input(ctx, bt, nb, v.lb));
              TESSERA_ASSIGN_OR_RETURN(Tensor * c, ctx.NewTensor(ct, nc));
              return SetRows(ctx, a, b, c);
            });
      }
    }
  }
}

// ROPE normal and NeoX, full and partial rotation, YaRN, frequency factors.
void AddRopeCases(CaseList& cases) {
  struct Variant {
    std::string name;
    Shape ne;  // [head_dim, n_head, n_tokens, n3]
    Layout layout;
    RopeParams params;
  };
  RopeParams full;
  full.n_ctx_orig = 512;
  full.n_dims = 64;
  RopeParams partial = full;
  partial.n_dims = 32;
  RopeParams yarn = full;
  yarn.freq_scale = 0.25f;
  yarn.ext_factor = 1.0f;
  RopeParams base = full;
  base.freq_base = 1e6f;
  base.attn_factor = 0.5f;
  RopeParams small = full;
  small.n_dims = 6;
  // Vector steps (8 normal pairs, 16 NeoX) and pairs after them.
  RopeParams steps = full;
  steps.n_dims = 44;
  const Variant variants[] = {
      {"n_dims 64", {64, 4, 5, 1}, kC, full},
      {"n_dims 32", {64, 4, 5, 1}, kC, partial},
      {"yarn freq_scale 0.25 ext 1", {64, 4, 5, 1}, kC, yarn},
      {"base 1e6 attn 0.5", {64, 3, 2, 1}, kC, base},
      {"n_dims 6", {10, 3, 7, 1}, kC, small},
      {"n_dims 44", {48, 3, 4, 1}, kC, steps},
      {"n_dims 64", {64, 4, 5, 1}, kS, full},
      {"n_dims 64 ne3 3", {64, 4, 5, 3}, kC, full},
      // Enough values for two threads (CpuIsParallelWorthy), the second's
      // rows starting inside a position's heads.
      {"n_dims 64 two threads", {64, 5, 209, 1}, kC, full},
  };
  for (Type t : {kF32, kF16}) {
    for (int32_t mode : {kRopeNormal, kRopeNeox}) {
      for (const Variant& v : variants) {
        if (t != kF32 && v.layout != kC) continue;
        RopeParams params = v.params;
        params.mode = mode;
        cases.Add(absl::StrCat("ROPE ", mode == kRopeNeox ? "neox " : "normal ",
                               v.name, " ", Operand(t, v.ne, v.layout)),
                  NmseForType(t),
                  WithInputs(t, v.ne, v.layout, kI32, {v.ne[2], 1, 1, 1}, kC,
                             [params](Context& c, Tensor* a, Tensor* pos) {
                               return Rope(c, a, pos, params);
                             }));
      }
    }
  }
  // Frequency factors (LLaMA 3.1+): F32 [n_dims / 2]. Every input is drawn
  // from [1, 4] so that the factors, like real ones, are positive and
  // keep the angles near those without them.
  for (Type t : {kF32, kF16}) {
    for (int32_t mode : {kRopeNormal, kRopeNeox}) {
      for (const RopeParams& v : {full, partial, yarn}) {
        RopeParams params = v;
        params.mode = mode;
        const Shape ne = {64, 4, 5, 1};
        const Shape nf = {params.n_dims / 2, 1, 1, 1};
        cases.Add(
            absl::StrCat("ROPE ", mode == kRopeNeox ? "neox " : "normal ",
                         "freq_factors n_dims ", params.n_dims,
                         params.ext_factor != 0.0f ? " yarn " : " ",
                         Operand(t, ne)),
            NmseForType(t),
            [t, ne, nf, params](Context& c) -> absl::StatusOr<Tensor*> {
              TESSERA_ASSIGN_OR_RETURN(Tensor * a, Input(c, t, ne));
              TESSERA_ASSIGN_OR_RETURN(Tensor * pos,
                                       Input(c, kI32, {ne[2], 1, 1, 1}));
              TESSERA_ASSIGN_OR_RETURN(Tensor * factors, Input(c, kF32, nf));
              return Rope(c, a, pos, params, factors);
            },
            1.0f, 4.0f);
      }
    }
  }
}

// CONCAT along each dim.
void AddConcatCases(CaseList& cases) {
  for (int dim = 0; dim < kMaxDims; ++dim) {
    for (Type t : {kF32, kF16, kI32}) {
      if (t != kF32 && dim % 2 == 1) continue;
      Shape na = {7, 5, 3, 2};
      Shape nb = na;
      nb[dim] = 4;
      cases.Add(absl::StrCat("CONCAT dim ", dim, " ", Operand(t, na), " + ",
                             Operand(t, nb)),
                NmseForType(t),
                WithInputs(t, na, kC, t, nb, kC,
                           [dim](Context& c, Tensor* a, Tensor* b) {
                             return Concat(c, a, b, dim);
                           }));
    }
  }
  cases.Add("CONCAT dim 1 f32 7x5x3x2 perm + 7x2x3x2", kNmseF32,
            WithInputs(kF32, {7, 5, 3, 2}, kP, kF32, {7, 2, 3, 2}, kC,
                       [](Context& c, Tensor* a, Tensor* b) {
                         return Concat(c, a, b, 1);
                       }));
  cases.Add("CONCAT dim 0 f32 0x5x3 + 4x5x3", kNmseF32,
            WithInputs(kF32, {0, 5, 3, 1}, kC, kF32, {4, 5, 3, 1}, kC,
                       [](Context& c, Tensor* a, Tensor* b) {
                         return Concat(c, a, b, 0);
                       }));
}

// FLASH_ATTN_EXT with K and V of every type it reads (F32, F16, BF16, and
// the 32-value blocks where the head sizes are whole blocks), alike and mixed,
// masks, GQA, softcap and ALiBi.
void AddFlashAttnCases(CaseList& cases) {
  struct Variant {
    int64_t d, dv, n_q, n_kv, h, h_kv, batch;
    std::optional<Type> mask_type;
    Shape mask_ne;
    float max_bias, softcap;
    bool permuted;  // q, k, v as permuted views (llama.cpp's layout)
  };
  const Variant variants[] = {
      {64, 64, 1, 32, 4, 4, 1, std::nullopt, {}, 0.0f, 0.0f, false},
      {64, 64, 1, 32, 4, 4, 1, kF16, {32, 4, 1, 1}, 0.0f, 0.0f, false},
      {64, 64, 7, 33, 8, 2, 1, kF16, {33, 8, 1, 1}, 0.0f, 0.0f, false},
      {40, 40, 5, 16, 4, 1, 2, kF32, {16, 5, 1, 2}, 0.0f, 0.0f, false},
      {64, 64, 3, 16, 4, 4, 1, kF16, {16, 3, 4, 1}, 0.0f, 20.0f, false},
      {32, 32, 4, 16, 6, 6, 1, kF16, {16, 4, 1, 1}, 8.0f, 0.0f, false},
      {16, 24, 3, 10, 2, 2, 1, std::nullopt, {}, 0.0f, 0.0f, false},
      {32, 32, 5, 12, 4, 2, 1, kF16, {12, 5, 1, 1}, 0.0f, 0.0f, true},
      // Several key tiles, GQA groups of 4 over blocks of query rows, a
      // causal-style mask, ALiBi and softcap across tiles.
      {64, 48, 9, 150, 8, 2, 1, kF16, {150, 9, 1, 1}, 0.0f, 0.0f, false},
      {32, 32, 3, 530, 4, 4, 2, kF32, {530, 3, 1, 2}, 4.0f, 10.0f, false},
      {48, 48, 1, 130, 20, 1, 1, kF16, {130, 1, 1, 1}, 0.0f, 0.0f, true},
  };
  // K and V alike, and apart as llama.cpp's -ctk and -ctv may set them.
  const std::pair<Type, Type> kinds[] = {
      {kF16, kF16},   {kF32, kF32},   {kBF16, kBF16}, {kQ8_0, kQ8_0},
      {kQ4_0, kQ4_0}, {kQ8_0, kF16},  {kF16, kQ4_0},  {kBF16, kQ8_0},
      {kQ5_0, kQ5_0}, {kQ4_1, kQ4_1}, {kQ5_1, kF16}};
  for (const auto& [kt, vt] : kinds) {
    const int64_t block =
        std::max(Traits(kt).block_size, Traits(vt).block_size);
    for (const Variant& v : variants) {
      if (v.d % block != 0 || v.dv % block != 0) continue;
      std::string name = absl::StrCat(
          "FLASH_ATTN_EXT ",
          kt == vt ? TypeStr(kt)
                   : absl::StrCat("k ", TypeStr(kt), " v ", TypeStr(vt)),
          " d ", v.d, " dv ", v.dv, " q ", v.n_q, " kv ", v.n_kv, " heads ",
          v.h, "/", v.h_kv, " batch ", v.batch);
      if (v.mask_type) {
        absl::StrAppend(&name, " mask ", Operand(*v.mask_type, v.mask_ne));
      }
      if (v.max_bias != 0.0f) absl::StrAppend(&name, " max_bias ", v.max_bias);
      if (v.softcap != 0.0f) absl::StrAppend(&name, " softcap ", v.softcap);
      if (v.permuted) absl::StrAppend(&name, " perm");
      const Layout l = v.permuted ? kP : kC;
      const bool f32 = kt == kF32 && vt == kF32;
      cases.Add(
          name, f32 ? kNmseFlashAttnF32 : kNmseFlashAttnF16,
          [kt, vt, v, l](Context& ctx) -> absl::StatusOr<Tensor*> {
            TESSERA_ASSIGN_OR_RETURN(
                Tensor * q, Input(ctx, kF32, {v.d, v.n_q, v.h, v.batch}, l));
            TESSERA_ASSIGN_OR_RETURN(
                Tensor * k, Input(ctx, kt, {v.d, v.n_kv, v.h_kv, v.batch}, l));
            TESSERA_ASSIGN_OR_RETURN(
                Tensor * val,
                Input(ctx, vt, {v.dv, v.n_kv, v.h_kv, v.batch}, l));
            Tensor* mask = nullptr;
            if (v.mask_type) {
              TESSERA_ASSIGN_OR_RETURN(mask,
                                    ctx.NewTensor(*v.mask_type, v.mask_ne));
            }
            const float scale = 1.0f / std::sqrt(static_cast<float>(v.d));
            return FlashAttnExt(ctx, q, k, val, mask, scale, v.max_bias,
                                v.softcap);
          });
    }
  }
}

// The K-quants (Q2_K to Q6_K; rows of whole 256-value super-blocks):
// MUL_MAT with K-quant weights at k = 256 and 512 for n = 1, 3 and 8 (and
// with broadcast and strided weights), GET_ROWS from K-quant tables, and
// CPY to and from F32.
void AddKQuantCases(CaseList& cases) {
  struct MulMatVariant {
    int64_t k, m, n;
    std::array<int64_t, 2> a_batch, b_batch;
    Layout la;
  };
  const MulMatVariant mul_mats[] = {
      {256, 7, 1, {1, 1}, {1, 1}, kC}, {256, 7, 3, {1, 1}, {1, 1}, kC},
      {256, 7, 8, {1, 1}, {1, 1}, kC}, {512, 7, 1, {1, 1}, {1, 1}, kC},
      {512, 7, 3, {1, 1}, {1, 1}, kC}, {512, 7, 8, {1, 1}, {1, 1}, kC},
      {256, 4, 3, {2, 1}, {4, 1}, kC}, {512, 5, 3, {1, 1}, {1, 1}, kS},
  };
  const struct {
    Shape a;
    int64_t n;
    Layout layout;
  } gets[] = {{{256, 10, 2, 1}, 4, kC}, {{512, 6, 1, 1}, 6, kS}};
  for (Type t : {kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K}) {
    for (const MulMatVariant& v : mul_mats) {
      const Shape na = {v.k, v.m, v.a_batch[0], v.a_batch[1]};
      const Shape nb = {v.k, v.n, v.b_batch[0], v.b_batch[1]};
      cases.Add(absl::StrCat("MUL_MAT ", Operand(t, na, v.la), " * ",
                             Operand(kF32, nb)),
                kNmseMulMatQuantized,
                WithInputs(t, na, v.la, kF32, nb, kC, MulMat));
    }
    for (const auto& v : gets) {
      const Shape idx = {v.n, v.a[2], v.a[3], 1};
      cases.Add(absl::StrCat("GET_ROWS ", Operand(t, v.a, v.layout), " at ",
                             Operand(kI32, idx)),
                kNmseF32, WithInputs(t, v.a, v.layout, kI32, idx, kC, GetRows));
    }
    auto cpy = [](Context& ctx, Tensor* a, Tensor* b) {
      return Cpy(ctx, a, b);
    };
    const Shape ne = {256, 3, 2, 1};
    cases.Add(absl::StrCat("CPY ", Operand(kF32, ne), " -> ", TypeStr(t)),
              NmseForType(t), WithInputs(kF32, ne, kC, t, ne, kC, cpy));
    cases.Add(absl::StrCat("CPY ", Operand(t, ne, kP), " -> ", TypeStr(kF32)),
              kNmseF32, WithInputs(t, ne, kP, kF32, ne, kC, cpy));
  }
}

}  // namespace

std::vector<OpCase> AllCases() {
  CaseList cases;
  AddCopyCases(cases);
  AddCpyCases(cases);
  AddBinaryCases(cases);
  AddElementwiseCases(cases);
  AddGluCases(cases);
  AddRowCases(cases);
  AddMulMatCases(cases);
  AddRowIndexCases(cases);
  AddKQuantCases(cases);
  AddRopeCases(cases);
  AddConcatCases(cases);
  AddFlashAttnCases(cases);
  return cases.Take();
}

}  // namespace tessera::conformance
