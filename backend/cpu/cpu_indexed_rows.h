#ifndef TESSERA_BACKEND_CPU_CPU_INDEXED_ROWS_H_
#define TESSERA_BACKEND_CPU_CPU_INDEXED_ROWS_H_

// Fast GET_ROWS and SET_ROWS of the CPU device, the two directions of rows
// chosen by an index tensor. GET_ROWS gathers rows of any storage type into
// F32 rows by the level's conversions (RowToF32), or copies rows of the
// same type; SET_ROWS scatters F32 rows into F32, F16 and BF16 rows by the
// level's conversions and into quantized rows by the reference quantizers,
// or copies rows of the same type. Both take tensors with contiguous rows
// and check every index before any row moves.
//
// Each Try* computes part ctx.ith of ctx.nth of `node` and returns true
// when it fits the fast path; it returns false having done nothing
// otherwise, and for an index out of range (the reference kernel then runs
// and reports it). Every thread of the team gets the same answer.

#include "backend/cpu/cpu_compute.h"
#include "graph/tensor.h"

namespace tessera {

// Split by result rows.
bool TryGetRows(Tensor& node, const CpuComputeContext& ctx);

// Split by source rows (as the reference kernel splits them).
bool TrySetRows(Tensor& node, const CpuComputeContext& ctx);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_INDEXED_ROWS_H_
