// ggml's own RPC client (ggml-rpc, what llama.cpp's --rpc links) against a
// tesserad ggml-rpc endpoint, built and run by scripts/ggml_interop.sh
// against a ggml checkout; not part of the Bazel build (it needs ggml).
//
// One LLaMA-shaped layer and its output (GET_ROWS, RMS_NORM, MUL, MUL_MAT,
// ROPE, SET_ROWS with I64 rows into an F16 KV cache, views and permutes,
// FLASH_ATTN_EXT or MUL_MAT + SOFT_MAX + CONT into a 2-D shape, ADD,
// SWIGLU, ARGMAX) for a prompt of 8 tokens and 3 decode steps, each graph
// computed twice (the client sends the second as GRAPH_RECOMPUTE), in
// every weight type listed, on three backends:
//   - the endpoint, through ggml-rpc;
//   - ggml's CPU backend with the same weights;
//   - ggml's CPU backend with F32 weights holding the same values (the
//     quantized weights dequantized): the exact product both approximate.
// Both round activations before quantized products (ggml to Q8_0 / Q8_K
// with F16 scales, tessera to 8 bits with F32 scales; ggml's CPU also
// rounds activations to F16 before F16 products), so the bounds are those
// of that rounding: the largest logit difference relative to the largest
// logit, against ggml's CPU and against the exact values, at most 1e-3
// (F32), 3e-3 (F16) and 3e-2 (quantized).
//
//   ggml_client HOST:PORT

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-rpc.h"
#include "ggml.h"

namespace {

constexpr int kDim = 256, kHeads = 8, kKvHeads = 2, kHeadDim = kDim / kHeads,
              kFf = 512, kVocab = 300, kCtx = 64;

struct Model {
  ggml_context* ctx = nullptr;
  ggml_backend_buffer_t buffer = nullptr;
  ggml_tensor *embd, *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *gate_up,
      *down, *out_norm, *out, *cache_k, *cache_v;
};

// Values of a weight: uniform in [bias - scale, bias + scale], rounded
// through `round_as` when that is not F32 (the exact model's weights).
std::vector<float> Values(const ggml_tensor* t, uint32_t seed, float scale,
                          float bias, ggml_type round_as) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(bias - scale, bias + scale);
  std::vector<float> v(ggml_nelements(t));
  for (float& x : v) x = u(gen);
  if (round_as != GGML_TYPE_F32 && t->ne[1] > 1) {
    std::vector<char> q(ggml_row_size(round_as, t->ne[0]) * t->ne[1]);
    ggml_quantize_chunk(round_as, v.data(), q.data(), 0, t->ne[1], t->ne[0],
                        nullptr);
    ggml_get_type_traits(round_as)->to_float(q.data(), v.data(), v.size());
  }
  return v;
}

void Fill(ggml_tensor* t, uint32_t seed, float scale, float bias,
          ggml_type round_as) {
  const std::vector<float> v = Values(t, seed, scale, bias, round_as);
  std::vector<char> bytes(ggml_nbytes(t));
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(bytes.data(), v.data(), bytes.size());
  } else if (t->type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(v.data(), reinterpret_cast<ggml_fp16_t*>(bytes.data()),
                          v.size());
  } else {
    ggml_quantize_chunk(t->type, v.data(), bytes.data(), 0, t->ne[1], t->ne[0],
                        nullptr);
  }
  ggml_backend_tensor_set(t, bytes.data(), 0, bytes.size());
}

// Weights of type `type` (F32 weights rounded through `round_as`) and an
// empty cache, in a buffer of `backend`; null when it cannot allocate.
bool Load(ggml_backend_t backend, ggml_type type, ggml_type round_as,
          Model& m) {
  ggml_init_params params = {ggml_tensor_overhead() * 16, nullptr, true};
  m.ctx = ggml_init(params);
  auto matrix = [&](int64_t cols, int64_t rows) {
    return ggml_new_tensor_2d(m.ctx, type, cols, rows);
  };
  auto vector = [&] { return ggml_new_tensor_1d(m.ctx, GGML_TYPE_F32, kDim); };
  m.embd = matrix(kDim, kVocab);
  m.attn_norm = vector();
  m.wq = matrix(kDim, kDim);
  m.wk = matrix(kDim, kHeadDim * kKvHeads);
  m.wv = matrix(kDim, kHeadDim * kKvHeads);
  m.wo = matrix(kDim, kDim);
  m.ffn_norm = vector();
  m.gate_up = matrix(kDim, 2 * kFf);
  m.down = matrix(kFf, kDim);
  m.out_norm = vector();
  m.out = matrix(kDim, kVocab);
  m.cache_k = ggml_new_tensor_2d(m.ctx, GGML_TYPE_F16, kHeadDim * kKvHeads, kCtx);
  m.cache_v = ggml_new_tensor_2d(m.ctx, GGML_TYPE_F16, kHeadDim * kKvHeads, kCtx);
  m.buffer = ggml_backend_alloc_ctx_tensors(m.ctx, backend);
  if (m.buffer == nullptr) return false;
  Fill(m.embd, 1, 1.0f, 0.0f, round_as);
  Fill(m.attn_norm, 2, 0.1f, 1.0f, round_as);
  Fill(m.wq, 3, 0.1f, 0.0f, round_as);
  Fill(m.wk, 4, 0.1f, 0.0f, round_as);
  Fill(m.wv, 5, 0.1f, 0.0f, round_as);
  Fill(m.wo, 6, 0.1f, 0.0f, round_as);
  Fill(m.ffn_norm, 7, 0.1f, 1.0f, round_as);
  Fill(m.gate_up, 8, 0.1f, 0.0f, round_as);
  Fill(m.down, 9, 0.07f, 0.0f, round_as);
  Fill(m.out_norm, 10, 0.1f, 1.0f, round_as);
  Fill(m.out, 11, 0.1f, 0.0f, round_as);
  // Rows never written are masked out, but 0 * NaN would still be NaN.
  ggml_backend_tensor_memset(m.cache_k, 0, 0, ggml_nbytes(m.cache_k));
  ggml_backend_tensor_memset(m.cache_v, 0, 0, ggml_nbytes(m.cache_v));
  return true;
}

void Free(Model& m) {
  ggml_backend_buffer_free(m.buffer);
  ggml_free(m.ctx);
}

struct StepOutput {
  std::vector<float> logits;  // kVocab per token
  std::vector<int32_t> argmax;
};

// The logits of `tokens` at positions pos0.., written to the cache at the
// same rows and attending over every row up to their own position.
bool Step(ggml_backend_t backend, Model& m, const std::vector<int32_t>& tokens,
          int pos0, bool flash, StepOutput& out) {
  const int n = static_cast<int>(tokens.size());
  ggml_init_params params = {
      ggml_tensor_overhead() * 128 + ggml_graph_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(params);
  auto input = [&](ggml_type type, int64_t ne0, int64_t ne1) {
    ggml_tensor* t = ggml_new_tensor_2d(ctx, type, ne0, ne1);
    ggml_set_input(t);
    return t;
  };
  ggml_tensor* ids = input(GGML_TYPE_I32, n, 1);
  ggml_tensor* pos = input(GGML_TYPE_I32, n, 1);
  ggml_tensor* rows = input(GGML_TYPE_I64, n, 1);
  ggml_tensor* mask = input(GGML_TYPE_F16, kCtx, n);

  auto rope = [&](ggml_tensor* t) {
    return ggml_rope_ext(ctx, t, pos, nullptr, kHeadDim, 0, 4096, 10000.0f,
                         1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
  };
  auto heads_of = [&](ggml_tensor* cache) {
    ggml_tensor* v = ggml_view_3d(ctx, cache, kHeadDim, kKvHeads, kCtx,
                                  ggml_row_size(cache->type, kHeadDim),
                                  cache->nb[1], 0);
    return ggml_permute(ctx, v, 0, 2, 1, 3);  // [hd, ctx, kv heads]
  };
  ggml_tensor* x = ggml_get_rows(ctx, m.embd, ids);
  ggml_tensor* h = ggml_mul(ctx, ggml_rms_norm(ctx, x, 1e-5f), m.attn_norm);
  ggml_tensor* q = rope(
      ggml_reshape_3d(ctx, ggml_mul_mat(ctx, m.wq, h), kHeadDim, kHeads, n));
  ggml_tensor* k = rope(
      ggml_reshape_3d(ctx, ggml_mul_mat(ctx, m.wk, h), kHeadDim, kKvHeads, n));
  ggml_tensor* v = ggml_mul_mat(ctx, m.wv, h);
  ggml_tensor* keys = heads_of(ggml_set_rows(
      ctx, m.cache_k, ggml_reshape_2d(ctx, k, kHeadDim * kKvHeads, n), rows));
  ggml_tensor* values = heads_of(ggml_set_rows(ctx, m.cache_v, v, rows));
  ggml_tensor* qp = ggml_permute(ctx, q, 0, 2, 1, 3);  // [hd, n, heads]
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  ggml_tensor* attn;
  if (flash) {
    attn = ggml_reshape_2d(
        ctx, ggml_flash_attn_ext(ctx, qp, keys, values, mask, scale, 0, 0),
        kDim, n);
  } else {
    ggml_tensor* kq = ggml_soft_max_ext(
        ctx, ggml_mul_mat(ctx, keys, qp), mask, scale, 0.0f);
    ggml_tensor* vt = ggml_cont(ctx, ggml_permute(ctx, values, 1, 0, 2, 3));
    ggml_tensor* kqv = ggml_mul_mat(ctx, vt, kq);  // [hd, n, heads]
    attn = ggml_cont_2d(ctx, ggml_permute(ctx, kqv, 0, 2, 1, 3), kDim, n);
  }
  x = ggml_add(ctx, x, ggml_mul_mat(ctx, m.wo, attn));
  h = ggml_mul(ctx, ggml_rms_norm(ctx, x, 1e-5f), m.ffn_norm);
  h = ggml_mul_mat(ctx, m.down,
                   ggml_swiglu(ctx, ggml_mul_mat(ctx, m.gate_up, h)));
  x = ggml_mul(ctx, ggml_rms_norm(ctx, ggml_add(ctx, x, h), 1e-5f),
               m.out_norm);
  ggml_tensor* logits = ggml_mul_mat(ctx, m.out, x);
  ggml_tensor* best = ggml_argmax(ctx, logits);
  ggml_set_output(logits);
  ggml_set_output(best);
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, logits);
  ggml_build_forward_expand(graph, best);

  ggml_gallocr_t alloc =
      ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
  bool ok = ggml_gallocr_alloc_graph(alloc, graph);
  std::vector<int32_t> positions(n);
  std::vector<int64_t> row_ids(n);
  std::vector<ggml_fp16_t> bias(kCtx * n, ggml_fp32_to_fp16(-INFINITY));
  for (int i = 0; i < n; ++i) {
    positions[i] = row_ids[i] = pos0 + i;
    for (int j = 0; j <= pos0 + i; ++j) {
      bias[i * kCtx + j] = ggml_fp32_to_fp16(0.0f);
    }
  }
  // Twice; the allocator reuses an input's memory once it is read, so the
  // inputs go up before each run.
  for (int run = 0; ok && run < 2; ++run) {
    ggml_backend_tensor_set(ids, tokens.data(), 0, ggml_nbytes(ids));
    ggml_backend_tensor_set(pos, positions.data(), 0, ggml_nbytes(pos));
    ggml_backend_tensor_set(rows, row_ids.data(), 0, ggml_nbytes(rows));
    ggml_backend_tensor_set(mask, bias.data(), 0, ggml_nbytes(mask));
    ok = ggml_backend_graph_compute(backend, graph) == GGML_STATUS_SUCCESS;
  }
  if (ok) {
    out.logits.resize(ggml_nelements(logits));
    ggml_backend_tensor_get(logits, out.logits.data(), 0, ggml_nbytes(logits));
    out.argmax.resize(n);
    ggml_backend_tensor_get(best, out.argmax.data(), 0, ggml_nbytes(best));
  }
  ggml_gallocr_free(alloc);
  ggml_free(ctx);
  return ok;
}

// max |a - b| / max |b|.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double largest = 0, worst = 0;
  for (float x : b) largest = std::max(largest, std::fabs(double{x}));
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
  }
  return worst / largest;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ggml_client HOST:PORT\n");
    return 2;
  }
  const char* endpoint = argv[1];
  ggml_backend_t cpu = ggml_backend_cpu_init();
  ggml_backend_t rpc = ggml_backend_rpc_init(endpoint, 0);
  if (rpc == nullptr) {
    std::fprintf(stderr, "cannot reach %s\n", endpoint);
    return 1;
  }
  size_t free_bytes = 0, total_bytes = 0;
  ggml_backend_rpc_get_device_memory(endpoint, 0, &free_bytes, &total_bytes);
  std::printf("%s device 0: %zu of %zu MiB free\n", endpoint, free_bytes >> 20,
              total_bytes >> 20);
  std::printf("%-5s %-9s %12s %12s %12s %9s\n", "type", "attention",
              "vs ggml cpu", "exact: rpc", "exact: cpu", "argmax");
  int failures = 0;
  for (ggml_type type : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q8_0,
                         GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K}) {
    const double bound = type == GGML_TYPE_F32   ? 1e-3
                         : type == GGML_TYPE_F16 ? 3e-3
                                                 : 3e-2;
    for (bool flash : {true, false}) {
      Model remote, local, exact;
      if (!Load(rpc, type, GGML_TYPE_F32, remote) ||
          !Load(cpu, type, GGML_TYPE_F32, local) ||
          !Load(cpu, GGML_TYPE_F32, type, exact)) {
        std::fprintf(stderr, "cannot allocate the %s weights\n",
                     ggml_type_name(type));
        return 1;
      }
      double vs_cpu = 0, rpc_exact = 0, cpu_exact = 0;
      int same_argmax = 0, rows = 0;
      bool ran = true;
      const std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 250, 3, 77};
      for (int step = 0; ran && step < 4; ++step) {
        const std::vector<int32_t> tokens =
            step == 0 ? prompt : std::vector<int32_t>{(37 * step) % kVocab};
        const int pos0 = step == 0 ? 0 : static_cast<int>(prompt.size()) + step - 1;
        StepOutput r, c, e;
        ran = Step(rpc, remote, tokens, pos0, flash, r) &&
              Step(cpu, local, tokens, pos0, flash, c) &&
              Step(cpu, exact, tokens, pos0, flash, e);
        if (!ran) break;
        vs_cpu = std::max(vs_cpu, RelativeError(r.logits, c.logits));
        rpc_exact = std::max(rpc_exact, RelativeError(r.logits, e.logits));
        cpu_exact = std::max(cpu_exact, RelativeError(c.logits, e.logits));
        for (size_t i = 0; i < r.argmax.size(); ++i) {
          same_argmax += r.argmax[i] == c.argmax[i];
          ++rows;
        }
      }
      const bool ok = ran && vs_cpu <= bound && rpc_exact <= bound;
      failures += !ok;
      std::printf("%-5s %-9s %12.2e %12.2e %12.2e %6d/%-2d %s\n",
                  ggml_type_name(type), flash ? "flash" : "soft_max", vs_cpu,
                  rpc_exact, cpu_exact, same_argmax, rows,
                  !ran ? "FAILED TO RUN" : ok ? "ok" : "OUT OF BOUNDS");
      Free(remote);
      Free(local);
      Free(exact);
    }
  }
  ggml_backend_free(rpc);
  ggml_backend_free(cpu);
  return failures == 0 ? 0 : 1;
}
