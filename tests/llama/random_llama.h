#ifndef TESSERA_TESTS_LLAMA_RANDOM_LLAMA_H_
#define TESSERA_TESTS_LLAMA_RANDOM_LLAMA_H_

// A small random-weight LLaMA GGUF for tests: untied output, rope_freqs
// (LLaMA 3.1's frequency factors, in about [1, 4]), norms in F32 near 1,
// matrices of normal values scaled by 1/sqrt(fan-in), the same values for a
// given shape whatever the types (one fixed seed).

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/ggml_type.h"

namespace tessera::testing {

struct RandomLlama {
  int64_t n_layer = 2;
  int64_t n_embd = 64;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ff = 96;
  int64_t n_vocab = 128;
  // The matrices' ggml type (token_embd included), and that of attn_v,
  // ffn_down and output, which a Q4_K_M file keeps in Q6_K.
  int32_t type = kGgmlF32;
  int32_t wide_type = kGgmlF32;
};

// Writes `model` to `path`. Errors: the writer's (a shape a type cannot
// hold, the file's errno).
absl::Status WriteRandomLlama(const RandomLlama& model,
                              const std::string& path);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_LLAMA_RANDOM_LLAMA_H_
