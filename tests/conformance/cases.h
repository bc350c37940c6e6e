#ifndef TESSERA_TESTS_CONFORMANCE_CASES_H_
#define TESSERA_TESTS_CONFORMANCE_CASES_H_

// The op conformance cases: every op of graph/tensor.h over the types it
// takes and over shapes that stress devices (contiguous, permuted and
// strided views, broadcasting, sizes that are not multiples of 32 or of a
// vector width, single elements, empty dimensions). Each case is a graph
// builder; tests/conformance/runner.h runs it on a device and on the
// reference kernels and compares the outputs.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/context.h"
#include "graph/tensor.h"

namespace tessera::conformance {

// NMSE bounds: sum((device - reference)^2) / sum(reference^2).
//
// The reference kernels compute in float with double accumulations; a device
// may accumulate in float, in another order, with FMA, or with other
// transcendental approximations. The bounds allow for that and little more:
// an indexing or broadcasting bug gives an NMSE near 1.
//  - kNmseF32: F32 in and out (float rounding only; ggml's default bound).
//  - kNmseF16: an F16 input or output. A device may do the arithmetic in
//    half precision: one rounding of relative error 2^-11 per step.
//  - kNmseBF16: a BF16 input or output: relative error 2^-8 per step.
//  - kNmseTranscendental: F32 GELU and GeGLU, which devices commonly compute
//    from an F16 lookup table as ggml's CPU backend does.
//  - kNmseQ8_0Out, kNmseQ4_0Out: a Q8_0 or Q4_0 output (CPY, SET_ROWS),
//    compared dequantized (Q4_1, Q5_0 and Q5_1, whose steps are no larger,
//    use kNmseQ4_0Out). Devices use the same quantizer, so only values on
//    a rounding boundary may differ, by one step (about 6e-5 for Q8_0 and
//    1.6e-2 for Q4_0 in squared error); the bounds allow a few such steps in
//    a case of a few hundred values. Dequantizing (CPY to F32, GET_ROWS,
//    DUP) is exact and uses kNmseF32.
//  - kNmseKQuantOut: a Q4_K, Q5_K or Q6_K output (CPY), compared
//    dequantized; as for Q4_0, a few values on a rounding boundary may
//    differ by one step.
//  - kNmseMulMatQuantized: MUL_MAT with a quantized src0 (a 32-value block
//    type or a K-quant). Devices quantize src1 to 8 bits for the dot
//    products, one scale per 32 values or 256 (K-quants), as ggml does,
//    which costs about 1e-5 to 3e-5; ggml's own MUL_MAT bound is 5e-4.
//  - kNmseFlashAttnF32, kNmseFlashAttnF16: FLASH_ATTN_EXT with F32 K/V, or
//    with K/V of another type (F16, BF16, Q8_0, Q4_0). With those devices
//    may round Q and the softmax weights to F16 for the dot products, or
//    quantize Q as ggml's CPU backend does for Q8_0/Q4_0 keys (ggml's bound
//    is 5e-4).
inline constexpr double kNmseF32 = 1e-7;
inline constexpr double kNmseF16 = 1e-5;
inline constexpr double kNmseBF16 = 1e-4;
inline constexpr double kNmseTranscendental = 1e-6;
inline constexpr double kNmseQ8_0Out = 1e-5;
inline constexpr double kNmseQ4_0Out = 1e-3;
inline constexpr double kNmseKQuantOut = 1e-3;
inline constexpr double kNmseMulMatQuantized = 5e-4;
inline constexpr double kNmseFlashAttnF32 = 1e-6;
inline constexpr double kNmseFlashAttnF16 = 5e-4;

// The bound for values of `type` (an input or output type of a case).
double NmseForType(Type type);

struct OpCase {
  // Human-readable: op, types, shapes, layout ("ADD f16 10x5x4x3 +
  // 10x1x1x1 perm"). Unique among AllCases() after SanitizedName().
  std::string name;
  // Creates the case's input leafs in `ctx` (Context::NewTensor, optionally
  // seen through views) and returns the output of the graph. Leafs are
  // filled by the runner: floats uniform in [input_min, input_max], I32
  // tensors by how they are used (row indices valid for GET_ROWS and
  // distinct per row for SET_ROWS, positions for ROPE).
  std::function<absl::StatusOr<Tensor*>(Context&)> build;
  // NMSE bound for float outputs; integer outputs (ARGMAX, ARGSORT, I32
  // copies) must match exactly.
  double max_nmse = kNmseF32;
  float input_min = -1.0f;
  float input_max = 1.0f;
};

// Every case, in a fixed order.
std::vector<OpCase> AllCases();

// `name` with every run of characters other than letters and digits turned
// into one '_' and none at either end: a gtest parameter name.
std::string SanitizedName(const std::string& name);

}  // namespace tessera::conformance

#endif  // TESSERA_TESTS_CONFORMANCE_CASES_H_
