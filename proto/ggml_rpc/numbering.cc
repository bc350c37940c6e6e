#include "proto/ggml_rpc/numbering.h"

#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace tessera::ggml_rpc {
namespace {

constexpr absl::string_view kOpNames[kGgmlOpCount] = {
    "NONE", "DUP", "ADD", "ADD_ID",
    "ADD1", "ACC", "SUB", "MUL",
    "DIV", "SQR", "SQRT", "LOG",
    "SIN", "COS", "SUM", "SUM_ROWS",
    "CUMSUM", "MEAN", "ARGMAX", "COUNT_EQUAL",
    "REPEAT", "REPEAT_BACK", "CONCAT", "SILU_BACK",
    "NORM", "RMS_NORM", "RMS_NORM_BACK", "GROUP_NORM",
    "L2_NORM", "MUL_MAT", "MUL_MAT_ID", "OUT_PROD",
    "SCALE", "SET", "CPY", "CONT",
    "RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE",
    "GET_ROWS", "GET_ROWS_BACK", "SET_ROWS", "DIAG",
    "DIAG_MASK_INF", "DIAG_MASK_ZERO", "SOFT_MAX", "SOFT_MAX_BACK",
    "ROPE", "ROPE_BACK", "CLAMP", "CONV_TRANSPOSE_1D",
    "IM2COL", "IM2COL_BACK", "IM2COL_3D", "COL2IM_1D",
    "CONV_2D", "CONV_3D", "CONV_2D_DW", "CONV_TRANSPOSE_2D",
    "POOL_1D", "POOL_2D", "POOL_2D_BACK", "UPSCALE",
    "PAD", "PAD_REFLECT_1D", "ROLL", "ARANGE",
    "TIMESTEP_EMBEDDING", "ARGSORT", "TOP_K", "LEAKY_RELU",
    "TRI", "FILL", "FLASH_ATTN_EXT", "FLASH_ATTN_BACK",
    "SSM_CONV", "SSM_SCAN", "WIN_PART", "WIN_UNPART",
    "GET_REL_POS", "ADD_REL_POS", "RWKV_WKV6", "GATED_LINEAR_ATTN",
    "RWKV_WKV7", "SOLVE_TRI", "GATED_DELTA_NET", "LIGHTNING_INDEXER",
    "DSV4_HC_COMB", "DSV4_HC_PRE", "DSV4_HC_POST", "UNARY",
    "MAP_CUSTOM1", "MAP_CUSTOM2", "MAP_CUSTOM3", "CUSTOM",
    "CROSS_ENTROPY_LOSS", "CROSS_ENTROPY_LOSS_BACK", "OPT_STEP_ADAMW", "OPT_STEP_SGD",
    "GLU",
};

struct OpPair {
  uint32_t ggml;
  Op op;
};
constexpr OpPair kOps[] = {
    {0, Op::kNone},       {1, Op::kDup},        {2, Op::kAdd},
    {6, Op::kSub},        {7, Op::kMul},        {8, Op::kDiv},
    {9, Op::kSqr},        {10, Op::kSqrt},      {11, Op::kLog},
    {15, Op::kSumRows},   {17, Op::kMean},      {18, Op::kArgmax},
    {22, Op::kConcat},    {24, Op::kNorm},      {25, Op::kRmsNorm},
    {29, Op::kMulMat},    {32, Op::kScale},     {34, Op::kCpy},
    {35, Op::kCont},      {36, Op::kReshape},   {37, Op::kView},
    {38, Op::kPermute},   {39, Op::kTranspose}, {40, Op::kGetRows},
    {42, Op::kSetRows},   {46, Op::kSoftMax},   {48, Op::kRope},
    {69, Op::kArgsort},   {74, Op::kFlashAttnExt}, {91, Op::kUnary},
    {100, Op::kGlu},
};

// ggml_unary_op ids tessera implements.
struct UnaryPair {
  int32_t ggml;
  UnaryOp op;
};
constexpr UnaryPair kUnaryOps[] = {
    {2, UnaryOp::kNeg},     {4, UnaryOp::kTanh}, {6, UnaryOp::kRelu},
    {7, UnaryOp::kSigmoid}, {8, UnaryOp::kGelu}, {10, UnaryOp::kSilu},
    {13, UnaryOp::kExp},
};

// ggml_glu_op ids tessera implements.
constexpr int32_t kGgmlGeGlu = 1;
constexpr int32_t kGgmlSwiGlu = 2;
// ggml_prec: GGML_PREC_DEFAULT and GGML_PREC_F32.
constexpr int32_t kGgmlPrecDefault = 0;
constexpr int32_t kGgmlPrecF32 = 10;

constexpr int32_t kGgmlFlagOutput = 2;
constexpr int32_t kGgmlFlagParam = 4;
constexpr int32_t kGgmlFlagsKnown = 31;

absl::Status Unsupported(uint32_t op, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("ggml op ", GgmlOpName(op), ": ", what));
}

}  // namespace

std::string GgmlOpName(uint32_t op) {
  if (op >= kGgmlOpCount) return absl::StrCat(op);
  return absl::StrCat(kOpNames[op], " (", op, ")");
}

absl::StatusOr<MappedOp> OpFromGgml(uint32_t op,
                                    const int32_t op_params[kMaxOpParams]) {
  MappedOp out;
  const OpPair* pair = nullptr;
  for (const OpPair& p : kOps) {
    if (p.ggml == op) pair = &p;
  }
  if (pair == nullptr) {
    return op >= kGgmlOpCount ? Unsupported(op, "unknown op")
                              : Unsupported(op, "not supported");
  }
  out.op = pair->op;
  for (int i = 0; i < kMaxOpParams; ++i) out.op_params[i] = op_params[i];
  switch (out.op) {
    case Op::kUnary: {
      const UnaryPair* u = nullptr;
      for (const UnaryPair& p : kUnaryOps) {
        if (p.ggml == op_params[0]) u = &p;
      }
      if (u == nullptr) {
        return Unsupported(op, absl::StrCat("unary op ", op_params[0],
                                            " is not supported"));
      }
      out.op_params[0] = static_cast<int32_t>(u->op);
      break;
    }
    case Op::kGlu:
      if (op_params[0] == kGgmlSwiGlu) {
        out.op_params[0] = static_cast<int32_t>(GluOp::kSwiGlu);
      } else if (op_params[0] == kGgmlGeGlu) {
        out.op_params[0] = static_cast<int32_t>(GluOp::kGeGlu);
      } else {
        return Unsupported(
            op, absl::StrCat("glu op ", op_params[0], " is not supported"));
      }
      break;
    case Op::kTranspose:
      for (int i = 0; i < kMaxOpParams; ++i) {
        if (op_params[i] != 0) {
          return Unsupported(op, absl::StrCat("op_params[", i, "] = ",
                                              op_params[i], ", expected 0"));
        }
      }
      out.op_params[0] = 1;
      out.op_params[1] = 0;
      out.op_params[2] = 2;
      out.op_params[3] = 3;
      break;
    case Op::kFlashAttnExt:
      if (op_params[3] != kGgmlPrecDefault && op_params[3] != kGgmlPrecF32) {
        return Unsupported(op, absl::StrCat("precision ", op_params[3],
                                            " is not a ggml_prec"));
      }
      out.op_params[3] = 0;
      break;
    default:
      break;
  }
  return out;
}

absl::StatusOr<uint32_t> FlagsFromGgml(int32_t flags) {
  if ((flags & ~kGgmlFlagsKnown) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ggml tensor flags ", flags));
  }
  uint32_t out = 0;
  if ((flags & kGgmlFlagOutput) != 0) out |= kFlagOutput;
  if ((flags & kGgmlFlagParam) != 0) out |= kFlagParam;
  return out;
}

}  // namespace tessera::ggml_rpc
