#ifndef TESSERA_MODEL_GGUF_WRITER_H_
#define TESSERA_MODEL_GGUF_WRITER_H_

// Writes GGUF files (see gguf_reader.h for the layout): metadata of every
// value type and tensors of any ggml type, laid out as ggml lays them out
// (in the order added, each at the next multiple of the alignment). Used to
// make models with random weights for tests, and anywhere a model is saved.
//
// Usage:
//   GgufWriter writer;
//   TESSERA_RETURN_IF_ERROR(writer.AddKv("general.architecture",
//                                        std::string("llama")));
//   TESSERA_RETURN_IF_ERROR(writer.AddTensor("w", kGgmlF32, {4, 2}, bytes));
//   TESSERA_RETURN_IF_ERROR(writer.WriteToFile(path));

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/gguf_value.h"

namespace tessera {

// ggml refuses tensor names of this many bytes or more (GGML_MAX_NAME).
inline constexpr size_t kGgufMaxTensorName = 64;

// Not thread-safe; the Write calls are const and may run while nothing is
// being added.
class GgufWriter {
 public:
  // `version` is written as given: 3 is current, 2 has the same layout, and
  // other values make files that readers refuse (for tests).
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  // Adds a key/value pair; "general.alignment" (a uint32 power of two) also
  // sets the alignment of the tensor data (default 32). Errors:
  // INVALID_ARGUMENT for an empty or duplicate key or a bad alignment.
  absl::Status AddKv(std::string key, GgufValue value);

  // Adds a tensor of ggml type `ggml_type` with `ne` values per dimension
  // (up to 4, innermost first) and a copy of `data`. Errors:
  // INVALID_ARGUMENT for a duplicate, empty or too long (kGgufMaxTensorName)
  // name, more than 4 dimensions, a negative or overflowing shape, ne[0] not
  // a multiple of the block size, or - for types whose layout is known
  // (FindGgmlTypeLayout) - `data` of another size than the shape needs.
  absl::Status AddTensor(std::string name, int32_t ggml_type,
                         absl::Span<const int64_t> ne,
                         absl::Span<const uint8_t> data);

  uint32_t alignment() const { return alignment_; }

  // The file's bytes.
  std::vector<uint8_t> WriteToBytes() const;
  // Writes the file to `path` (created or truncated). Errors: the errno of
  // the failed open, write or close as a status naming the path.
  absl::Status WriteToFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    int32_t ggml_type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };

  // Passes the file to `sink` in pieces, in order.
  void Serialize(
      absl::FunctionRef<void(const void* data, size_t size)> sink) const;

  const uint32_t version_;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  absl::flat_hash_set<std::string> keys_;
  std::vector<Tensor> tensors_;
  absl::flat_hash_set<std::string> names_;
};

}  // namespace tessera

#endif  // TESSERA_MODEL_GGUF_WRITER_H_
