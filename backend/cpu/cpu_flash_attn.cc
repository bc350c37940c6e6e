#include "backend/cpu/cpu_flash_attn.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/work_split.h"
#include "graph/op_types.h"
#include "graph/position_encoding.h"
#include "graph/type.h"

namespace tessera {
namespace {

// Queries of one unit of work and keys of one tile. Longer tiles read
// longer runs of each key and value head between the switches from one to
// the other, and rescale the accumulators less often: bench/ops
// FLASH_ATTN_EXT f16 decode (head 128, 4096 cached) took 526-551 us in
// tiles of 64 keys and 500-517 us in tiles of 256 (512: 507-530), and its
// prompt (512 queries) 248-254 ms and 221-241 ms, on a 2-core Sapphire
// Rapids-class VM.
constexpr int64_t kMaxQueries = 16;
constexpr int64_t kTileKeys = 256;

// Whether `t` has contiguous rows of an F32 tensor, or with `also` of one
// of the types `also` accepts.
bool RowsOf(const Tensor* t, bool (*also)(Type) = nullptr) {
  return t != nullptr && t->data != nullptr &&
         (t->type == Type::kF32 || (also != nullptr && also(t->type))) &&
         t->nb[0] == Traits(t->type).type_size;
}

bool IsF16(Type type) { return type == Type::kF16; }

bool Fits(const Tensor& node) {
  const Tensor* q = node.src[0];
  const Tensor* k = node.src[1];
  const Tensor* v = node.src[2];
  const Tensor* mask = node.src[3];
  if (!RowsOf(&node) || !RowsOf(q) || !RowsOf(k, IsAttnKvType) ||
      !RowsOf(v, IsAttnKvType) || node.IsEmpty() || k->ne[0] != q->ne[0] ||
      k->ne[1] <= 0 || k->ne[2] <= 0 || k->ne[3] <= 0 ||
      q->ne[2] % k->ne[2] != 0 || q->ne[3] % k->ne[3] != 0 ||
      v->ne[1] != k->ne[1] || v->ne[2] != k->ne[2] || v->ne[3] != k->ne[3] ||
      node.ne[0] != v->ne[0] || node.ne[1] != q->ne[2] ||
      node.ne[2] != q->ne[1] || node.ne[3] != q->ne[3]) {
    return false;
  }
  return mask == nullptr ||
         (RowsOf(mask, IsF16) && mask->ne[0] == k->ne[1] &&
          mask->ne[1] >= q->ne[1] && mask->ne[2] > 0 && mask->ne[3] > 0 &&
          q->ne[2] % mask->ne[2] == 0 && q->ne[3] % mask->ne[3] == 0);
}

// How a node's queries are grouped into units.
struct Units {
  int64_t heads;       // query heads per unit (sharing one k/v head)
  int64_t rows;        // query rows per unit
  int64_t head_parts;  // units over one k/v head's query heads
  int64_t row_parts;   // units over the query rows
  int64_t count;
};

Units UnitsOf(const Tensor& node) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const int64_t group = q.ne[2] / k.ne[2];
  Units u;
  u.heads = std::min(group, kMaxQueries);
  u.rows = std::min(q.ne[1], std::max<int64_t>(1, kMaxQueries / u.heads));
  u.head_parts = (group + u.heads - 1) / u.heads;
  u.row_parts = (q.ne[1] + u.rows - 1) / u.rows;
  u.count = q.ne[3] * k.ne[2] * u.head_parts * u.row_parts;
  return u;
}

int64_t Floats64(int64_t floats) { return (floats + 15) / 16 * 16; }

// One thread's scratch, offsets in floats, each a 64-byte multiple:
// queries, bias, scores, m, l, accumulators and which keys take part.
struct Scratch {
  explicit Scratch(const Tensor& node) {
    bias = Floats64(kMaxQueries * node.src[0]->ne[0]);
    scores = bias + kMaxQueries * kTileKeys;
    m = scores + kMaxQueries * kTileKeys;
    l = m + kMaxQueries;
    acc = l + kMaxQueries;
    live = acc + Floats64(kMaxQueries * node.src[2]->ne[0]);
    floats = live + Floats64((node.src[1]->ne[1] + 3) / 4);
  }

  int64_t bias, scores, m, l, acc, live;
  int64_t floats;
};

const char* At(const Tensor& t, int64_t i1, int64_t i2, int64_t i3) {
  return static_cast<const char*>(t.data) + i1 * t.nb[1] + i2 * t.nb[2] +
         i3 * t.nb[3];
}

// The mask row of query row `row` of head `head` in batch `batch` (the
// mask broadcast over heads and batches).
const char* MaskRow(const Tensor& mask, int64_t row, int64_t head,
                    int64_t batch) {
  return At(mask, row, head % mask.ne[2], batch % mask.ne[3]);
}

// Sets live[j] for each of the n mask values of `row` that is not -inf.
void MarkUnmasked(const Tensor& mask, const char* row, int64_t n, bool* live) {
  if (mask.type == Type::kF16) {
    constexpr uint16_t kF16NegInf = 0xFC00;
    const auto* bits = reinterpret_cast<const uint16_t*>(row);
    for (int64_t j = 0; j < n; ++j) live[j] |= bits[j] != kF16NegInf;
  } else {
    const auto* values = reinterpret_cast<const float*>(row);
    for (int64_t j = 0; j < n; ++j) {
      live[j] |= values[j] != -std::numeric_limits<float>::infinity();
    }
  }
}

// The mask rows whose keys a thread's scratch marks live (none: no mask),
// so that units which share them (a decode step's key/value heads) scan
// them once.
struct MarkedRows {
  int64_t batch = -1;  // of the mask
  int64_t row0 = -1;
  int64_t rows = -1;
  int64_t head0 = -1;  // of the mask
  int64_t heads = 0;
  bool operator==(const MarkedRows&) const = default;
};

// Asks the caches for rows [j0, j0 + n) of head `head` of K or V (`t`):
// a unit's first block, which no block before it asked for (the attention
// kernels ask for the next block's rows while they work on one). In a
// decode step the cache's rows come from memory (a model's weights pass
// through the caches between two steps), and asked for together they
// arrive in parallel rather than a few at a time as the kernel reaches
// them.
void PrefetchRows(const Tensor& t, int64_t j0, int64_t n, int64_t head,
                  int64_t batch) {
  const int64_t bytes = static_cast<int64_t>(RowSize(t.type, t.ne[0]));
  for (int64_t j = j0; j < j0 + n; ++j) {
    PrefetchBytes(At(t, j, head, batch), bytes);
  }
}

void RunUnit(const Tensor& node, const CpuComputeContext& ctx, const Units& u,
             int64_t unit, float* scratch, MarkedRows& marked) {
  const Tensor& q = *node.src[0];
  const Tensor& k = *node.src[1];
  const Tensor& v = *node.src[2];
  const Tensor* mask = node.src[3];
  const int64_t d = q.ne[0];
  const int64_t dv = v.ne[0];
  const int64_t n_kv = k.ne[1];
  const int64_t group = q.ne[2] / k.ne[2];
  const float max_bias = node.param<float>(1);
  // 1. Which queries: unit = ((batch * kv heads + kv head) * head_parts +
  //    head part) * row_parts + row part.
  const int64_t row_part = unit % u.row_parts;
  const int64_t head_part = (unit / u.row_parts) % u.head_parts;
  const int64_t kh = (unit / (u.row_parts * u.head_parts)) % k.ne[2];
  const int64_t batch = unit / (u.row_parts * u.head_parts * k.ne[2]);
  const int64_t kb = batch / (q.ne[3] / k.ne[3]);
  const int64_t head0 = kh * group + head_part * u.heads;
  const int64_t heads = std::min(u.heads, (kh + 1) * group - head0);
  const int64_t row0 = row_part * u.rows;
  const int64_t rows = std::min(u.rows, q.ne[1] - row0);
  const int64_t nq =
      heads * rows;  // query i: head head0 + i / rows, row i % rows

  const Scratch at(node);
  float* qs = scratch;
  float* bias = scratch + at.bias;
  float* scores = scratch + at.scores;
  float* m = scratch + at.m;
  float* l = scratch + at.l;
  float* acc = scratch + at.acc;
  for (int64_t i = 0; i < nq; ++i) {
    RowToF32(*ctx.kernels, q.type,
             At(q, row0 + i % rows, head0 + i / rows, batch), qs + i * d, d);
    m[i] = -std::numeric_limits<float>::infinity();
    l[i] = 0.0f;
  }
  std::fill(acc, acc + nq * dv, 0.0f);

  // 2. Key/value tiles, read in place, the masks' bias, the block kernel.
  AttnBlockArgs args;
  args.q = qs;
  args.nq = nq;
  args.bias = mask != nullptr ? bias : nullptr;
  args.d = d;
  args.dv = dv;
  args.scale = node.param<float>(0);
  args.softcap = node.param<float>(2);
  args.scores = scores;
  args.m = m;
  args.l = l;
  args.acc = acc;
  args.k_stride = k.nb[1];
  args.k_type = k.type;
  args.v_stride = v.nb[1];
  args.v_type = v.type;
  // Keys [j0, j0 + n) as one block, with the masks' bias for them.
  auto block = [&](int64_t j0, int64_t n, bool next_follows) {
    args.k = At(k, j0, kh, kb);
    args.v = At(v, j0, kh, kb);
    if (mask != nullptr) {
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t head = head0 + i / rows;
        float* b = bias + i * n;
        RowToF32(*ctx.kernels, mask->type,
                 MaskRow(*mask, row0 + i % rows, head, batch) +
                     j0 * mask->nb[0],
                 b, n);
        const float slope = AlibiSlope(max_bias, head, q.ne[2]);
        if (slope != 1.0f) {
          for (int64_t j = 0; j < n; ++j) b[j] *= slope;
        }
      }
    }
    args.n = n;
    args.next_follows = next_follows;
    ctx.kernels->attn_block(args);
  };
  // The keys that take part: those not masked out (-inf) for every query
  // of the unit, as in the reference, so that a cache's unused positions
  // cost nothing. Blocks are their runs, kTileKeys at most.
  bool* live = reinterpret_cast<bool*>(scratch + at.live);
  const MarkedRows wanted =
      mask == nullptr
          ? MarkedRows{}
          : MarkedRows{batch % mask->ne[3], row0, rows, head0 % mask->ne[2],
                       std::min(heads, mask->ne[2])};
  if (wanted != marked) {
    marked = wanted;
    std::fill(live, live + n_kv, mask == nullptr);
    for (int64_t h = 0; h < wanted.heads; ++h) {
      for (int64_t r = 0; r < rows; ++r) {
        MarkUnmasked(*mask, MaskRow(*mask, row0 + r, head0 + h, batch), n_kv,
                     live);
      }
    }
  }
  bool first = true;
  for (int64_t j = 0; j < n_kv;) {
    const void* start = std::memchr(live + j, true, n_kv - j);
    if (start == nullptr) break;
    j = static_cast<const bool*>(start) - live;
    const int64_t most = std::min(kTileKeys, n_kv - j);
    const void* stop = std::memchr(live + j, false, most);
    const int64_t end =
        stop == nullptr ? j + most : static_cast<const bool*>(stop) - live;
    if (first) {
      PrefetchRows(k, j, end - j, kh, kb);
      PrefetchRows(v, j, end - j, kh, kb);
      first = false;
    }
    block(j, end - j, end < n_kv && live[end]);
    j = end;
  }

  // 3. Normalize and store: dst row (head, query row, batch).
  for (int64_t i = 0; i < nq; ++i) {
    float* out = reinterpret_cast<float*>(
        static_cast<char*>(node.data) + (head0 + i / rows) * node.nb[1] +
        (row0 + i % rows) * node.nb[2] + batch * node.nb[3]);
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    for (int64_t t = 0; t < dv; ++t) out[t] = acc[i * dv + t] * inv;
  }
}

}  // namespace

size_t FlashAttnWorkSize(const Tensor& node, int nth) {
  if (!Fits(node)) return 0;
  return static_cast<size_t>(nth) * Scratch(node).floats * sizeof(float);
}

bool TryFlashAttn(Tensor& node, const CpuComputeContext& ctx) {
  if (!Fits(node)) return false;
  const Units u = UnitsOf(node);
  float* scratch =
      reinterpret_cast<float*>(ctx.work) + ctx.ith * Scratch(node).floats;
  const WorkRange mine = WorkPart(u.count, ctx.ith, ctx.nth);
  MarkedRows marked{.heads = -1};  // nothing marked yet
  for (int64_t unit = mine.begin; unit < mine.end; ++unit) {
    RunUnit(node, ctx, u, unit, scratch, marked);
  }
  return true;
}

}  // namespace tessera
