#ifndef TESSERA_BACKEND_CPU_CPU_GET_ROWS_H_
#define TESSERA_BACKEND_CPU_CPU_GET_ROWS_H_

// Fast GET_ROWS of the CPU device: rows of any storage type gathered into
// F32 rows by the level's conversions (RowToF32), and I32 rows copied. It
// takes nodes whose table and result have contiguous rows; every index is
// checked before any row moves.

#include "backend/cpu/cpu_compute.h"
#include "graph/tensor.h"

namespace tessera {

// Computes part ctx.ith of ctx.nth of `node` (split by result rows) and
// returns true when it fits the fast path; returns false having done
// nothing otherwise, and for an index out of range (the reference kernel
// then runs and reports it). Every thread of the team gets the same
// answer.
bool TryGetRows(Tensor& node, const CpuComputeContext& ctx);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_GET_ROWS_H_
