#include "tests/llama/random_llama.h"

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/type.h"
#include "model/gguf_writer.h"

namespace tessera::testing {

absl::Status WriteRandomLlama(const RandomLlama& m, const std::string& path) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  GgufWriter w;
  const std::pair<const char*, GgufValue> kvs[] = {
      {"general.architecture", std::string("llama")},
      {"llama.block_count", static_cast<uint32_t>(m.n_layer)},
      {"llama.embedding_length", static_cast<uint32_t>(m.n_embd)},
      {"llama.feed_forward_length", static_cast<uint32_t>(m.n_ff)},
      {"llama.attention.head_count", static_cast<uint32_t>(m.n_head)},
      {"llama.attention.head_count_kv", static_cast<uint32_t>(m.n_head_kv)},
      {"llama.rope.freq_base", 10000.0f},
      {"llama.attention.layer_norm_rms_epsilon", 1e-5f},
      {"llama.context_length", uint32_t{128}},
  };
  for (const auto& [key, value] : kvs) {
    TESSERA_RETURN_IF_ERROR(w.AddKv(key, value));
  }
  auto add = [&](const std::string& name, std::vector<int64_t> ne,
                 const std::vector<float>& values,
                 int32_t type) -> absl::Status {
    std::vector<uint8_t> bytes;
    if (type == kGgmlF32) {
      bytes.resize(values.size() * sizeof(float));
      std::memcpy(bytes.data(), values.data(), bytes.size());
    } else {
      TESSERA_ASSIGN_OR_RETURN(const Type t, TesseraTypeFromGgml(type));
      const int64_t count = static_cast<int64_t>(values.size());
      bytes.resize(RowSize(t, count));
      RowFromFloat(t, values.data(), bytes.data(), count);
    }
    return w.AddTensor(name, type, std::move(ne), bytes);
  };
  auto random = [&](const std::string& name, std::vector<int64_t> ne,
                    float scale, float offset, int32_t type) -> absl::Status {
    int64_t count = 1;
    for (int64_t n : ne) count *= n;
    std::vector<float> values(count);
    for (float& x : values) x = offset + scale * normal(rng);
    return add(name, std::move(ne), values, type);
  };
  const float in_embd = 1.0f / std::sqrt(static_cast<float>(m.n_embd));
  const int64_t head_dim = m.n_embd / m.n_head;
  const int64_t kv_row = head_dim * m.n_head_kv;
  TESSERA_RETURN_IF_ERROR(
      random("token_embd.weight", {m.n_embd, m.n_vocab}, 1.0f, 0.0f, m.type));
  std::vector<float> factors(head_dim / 2);
  for (size_t i = 0; i < factors.size(); ++i) {
    factors[i] = 1.0f + 3.0f * i / factors.size();
  }
  TESSERA_RETURN_IF_ERROR(add("rope_freqs.weight",
                              {static_cast<int64_t>(factors.size())}, factors,
                              kGgmlF32));
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    const struct {
      const char* name;
      std::vector<int64_t> ne;
      float scale, offset;
      int32_t type;
    } tensors[] = {
        {"attn_norm.weight", {m.n_embd}, 0.1f, 1.0f, kGgmlF32},
        {"attn_q.weight", {m.n_embd, m.n_embd}, in_embd, 0.0f, m.type},
        {"attn_k.weight", {m.n_embd, kv_row}, in_embd, 0.0f, m.type},
        {"attn_v.weight", {m.n_embd, kv_row}, in_embd, 0.0f, m.wide_type},
        {"attn_output.weight", {m.n_embd, m.n_embd}, in_embd, 0.0f, m.type},
        {"ffn_norm.weight", {m.n_embd}, 0.1f, 1.0f, kGgmlF32},
        {"ffn_gate.weight", {m.n_embd, m.n_ff}, in_embd, 0.0f, m.type},
        {"ffn_up.weight", {m.n_embd, m.n_ff}, in_embd, 0.0f, m.type},
        {"ffn_down.weight",
         {m.n_ff, m.n_embd},
         1.0f / std::sqrt(static_cast<float>(m.n_ff)),
         0.0f,
         m.wide_type},
    };
    for (const auto& t : tensors) {
      TESSERA_RETURN_IF_ERROR(
          random(p + t.name, t.ne, t.scale, t.offset, t.type));
    }
  }
  TESSERA_RETURN_IF_ERROR(
      random("output_norm.weight", {m.n_embd}, 0.1f, 1.0f, kGgmlF32));
  TESSERA_RETURN_IF_ERROR(random("output.weight", {m.n_embd, m.n_vocab},
                                 in_embd * 2.0f, 0.0f, m.wide_type));
  return w.WriteToFile(path);
}

}  // namespace tessera::testing
