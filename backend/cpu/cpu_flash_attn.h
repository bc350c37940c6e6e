#ifndef TESSERA_BACKEND_CPU_CPU_FLASH_ATTN_H_
#define TESSERA_BACKEND_CPU_CPU_FLASH_ATTN_H_

// FLASH_ATTN_EXT of the CPU device: tiles of keys and values with online
// softmax (the level's attn_block kernel), never the whole score matrix.
// A unit of work is one key/value head of one batch with up to kMaxQueries
// queries: the query heads that share that key/value head (GQA) times a
// block of query rows, so each key and value tile is read once for all of
// them. Units are split over the team. Keys and values of any type
// IsAttnKvType accepts are read where they are (views with any row
// stride). Mask (F32 or F16, broadcast over heads and batches), ALiBi
// slopes and softcap follow the reference kernel; keys that the mask
// sets to -inf for every query of a unit are not read at all, so a decode
// step over a cache's whole capacity reads only the positions in use.

#include <cstddef>

#include "backend/cpu/cpu_compute.h"
#include "graph/tensor.h"

namespace tessera {

// Scratch bytes TryFlashAttn needs for `node` on `nth` threads (0 when the
// node does not fit the fast path).
size_t FlashAttnWorkSize(const Tensor& node, int nth);

// Computes part ctx.ith of ctx.nth of `node` and returns true when it fits
// the fast path (F32 q and dst with contiguous rows, k and v of an
// IsAttnKvType type and an F32 or F16 mask with contiguous rows, consistent
// shapes); returns false having done nothing otherwise. Every thread of the
// team gets the same answer.
bool TryFlashAttn(Tensor& node, const CpuComputeContext& ctx);

}  // namespace tessera

#endif  // TESSERA_BACKEND_CPU_CPU_FLASH_ATTN_H_
