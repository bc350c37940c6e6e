#ifndef TESSERA_GRAPH_REFERENCE_INTERNAL_H_
#define TESSERA_GRAPH_REFERENCE_INTERNAL_H_

// Shared helpers of the reference kernels (graph/reference*.cc); not a
// public interface. Every kernel declared here has the contract of
// ReferenceCompute() for its ops on a node that passed CheckNode()
// (graph/node_checks.h): it returns OK at once for an empty node, checks
// what depends on the data (row indices), and computes part `ith` of `nth`.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/tensor.h"

namespace tessera::reference_internal {

// Half-open range [begin, end) of units.
struct Range {
  int64_t begin;
  int64_t end;
};

// Part `ith` of `nth` of `n` units: consecutive chunks of ceil(n / nth).
Range PartRange(int64_t n, int ith, int nth);

// Coordinates (i1, i2, i3) of row `r` of `t` in row-major order.
struct RowIndex {
  int64_t i1;
  int64_t i2;
  int64_t i3;
};
RowIndex RowAt(const Tensor& t, int64_t r);

// Address of element (or block) i0 of row (i1, i2, i3).
inline char* ElementPtr(const Tensor& t, int64_t i0, int64_t i1, int64_t i2,
                        int64_t i3) {
  return static_cast<char*>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] +
         i2 * t.nb[2] + i3 * t.nb[3];
}
inline char* RowPtr(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return ElementPtr(t, 0, i1, i2, i3);
}

// One scalar of a non-quantized type at `p`, as float (I32 through
// static_cast), and the reverse (I32 truncates toward zero, saturating;
// NaN becomes 0).
float LoadScalar(Type type, const void* p);
void StoreScalar(Type type, float v, void* p);

// Reads row (i1, i2, i3) of `t` as ne[0] floats into `out` (resized).
// Scalar types go through nb[0]; quantized rows are contiguous blocks.
void LoadRow(const Tensor& t, int64_t i1, int64_t i2, int64_t i3,
             std::vector<float>& out);
// Writes ne[0] floats to row (i1, i2, i3) of `t`, converting to its type.
void StoreRow(const Tensor& t, int64_t i1, int64_t i2, int64_t i3,
              const float* values);

// "[Reference ADD] " prefix for error messages.
std::string Where(const Tensor& node);

// INVALID_ARGUMENT with Where(node) and the pieces.
template <typename... Args>
absl::Status Invalid(const Tensor& node, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(Where(node), args...));
}

// Op families, one file each.
// reference_copy.cc: DUP, CPY, CONT, GET_ROWS, SET_ROWS, CONCAT.
absl::Status ComputeCopy(Tensor& node, int ith, int nth);
absl::Status ComputeGetRows(Tensor& node, int ith, int nth);
absl::Status ComputeSetRows(Tensor& node, int ith, int nth);
absl::Status ComputeConcat(Tensor& node, int ith, int nth);
// reference_elementwise.cc: ADD, SUB, MUL, DIV, SCALE, SQR, SQRT, LOG,
// UNARY, GLU.
absl::Status ComputeBinary(Tensor& node, int ith, int nth);
absl::Status ComputeUnaryLike(Tensor& node, int ith, int nth);
absl::Status ComputeGlu(Tensor& node, int ith, int nth);
// reference_rows.cc: SUM_ROWS, MEAN, ARGMAX, NORM, RMS_NORM, ARGSORT,
// MUL_MAT.
absl::Status ComputeSumRows(Tensor& node, int ith, int nth);
absl::Status ComputeArgmax(Tensor& node, int ith, int nth);
absl::Status ComputeNorm(Tensor& node, int ith, int nth);
absl::Status ComputeArgsort(Tensor& node, int ith, int nth);
absl::Status ComputeMulMat(Tensor& node, int ith, int nth);
// reference_attention.cc: SOFT_MAX, ROPE, FLASH_ATTN_EXT.
absl::Status ComputeSoftMax(Tensor& node, int ith, int nth);
absl::Status ComputeRope(Tensor& node, int ith, int nth);
absl::Status ComputeFlashAttnExt(Tensor& node, int ith, int nth);

}  // namespace tessera::reference_internal

#endif  // TESSERA_GRAPH_REFERENCE_INTERNAL_H_
