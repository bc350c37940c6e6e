#ifndef TESSERA_MODEL_GGUF_READER_H_
#define TESSERA_MODEL_GGUF_READER_H_

// A reader for GGUF files (versions 2 and 3, little-endian), the model format
// of ggml. The file is memory-mapped read-only; metadata is parsed and
// copied, tensor data stays in the mapping.
//
// Layout, as ggml's gguf.h defines it (all integers little-endian):
//   "GGUF" · uint32 version · uint64 tensor count · uint64 KV count
//   KV pairs: string key · uint32 value type · value
//   tensor infos: string name · uint32 n_dims · uint64 ne[n_dims] ·
//                 int32 ggml type · uint64 offset (from the data section)
//   padding to the alignment (only when there are tensors) · data section
// Strings are a uint64 length and the bytes. The alignment is the uint32
// value of "general.alignment", 32 when absent.
//
// Usage:
//   TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file,
//                            GgufFile::Open(path));
//   TESSERA_ASSIGN_OR_RETURN(absl::string_view arch,
//                            file->GetString("general.architecture"));
//   const GgufTensor* w = file->FindTensor("token_embd.weight");
//   TESSERA_ASSIGN_OR_RETURN(Type type, w->TesseraType());
//   // w->data: the tensor's bytes, valid while `file` lives.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph/type.h"
#include "model/gguf_value.h"

namespace tessera {

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;
inline constexpr absl::string_view kGgufAlignmentKey = "general.alignment";

struct GgufKv {
  std::string key;
  GgufValue value;
};

// A tensor of the file.
struct GgufTensor {
  std::string name;
  int n_dims = 0;                         // 0..4, as stored
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[i] = 1 for i >= n_dims
  int32_t ggml_type = 0;                  // ggml's id, known to tessera or not
  std::optional<Type> type;               // tessera's type when it has one
  uint64_t offset = 0;                    // from the start of the data section
  // Bytes of the data when the ggml type's layout is known
  // (FindGgmlTypeLayout); nullopt otherwise.
  std::optional<uint64_t> num_bytes;
  // The data, inside bytes() of the file (valid while the GgufFile lives;
  // empty when num_bytes is unknown).
  absl::Span<const uint8_t> data;

  int64_t NumElements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // tessera's type. Errors: UNIMPLEMENTED naming the tensor and its ggml type
  // when tessera has no such type.
  absl::StatusOr<Type> TesseraType() const;
};

// A parsed GGUF file. Immutable after Open; every method is const and safe
// to call from any number of threads.
class GgufFile {
 public:
  // Maps and parses the file at `path`. Errors: the open/stat/mmap errno as a
  // status (NOT_FOUND, PERMISSION_DENIED, ...) naming the path; otherwise as
  // FromBytes.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(
      const std::string& path);

  // Parses a copy of `bytes`. Every size, count, length and offset is checked
  // before use. Errors, each starting "[GGUF] " and naming the item and byte
  // offset:
  //   DATA_LOSS: the bytes end before what they declare (truncated header,
  //     a string length, array or item count larger than the bytes left,
  //     tensor data past the end);
  //   INVALID_ARGUMENT: a value no valid file holds (magic, a version other
  //     than 2 or 3 - big-endian files read as one -, an unknown or nested
  //     value type, an empty or duplicate key, a duplicate tensor name,
  //     n_dims > 4, a dimension above INT64_MAX, an element count or byte
  //     size that overflows, ne[0] not a multiple of the block size, a
  //     general.alignment that is not a uint32 power of two, a misaligned
  //     tensor offset, overlapping tensor data).
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(
      absl::Span<const uint8_t> bytes);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // The file offset of the data section.
  uint64_t data_offset() const { return data_offset_; }
  // The whole file.
  absl::Span<const uint8_t> bytes() const { return bytes_; }

  // Key/value pairs and tensors in file order.
  const std::vector<GgufKv>& kvs() const { return kvs_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  // The value of `key`, or nullptr.
  const GgufValue* Find(absl::string_view key) const;
  // The tensor named `name`, or nullptr.
  const GgufTensor* FindTensor(absl::string_view name) const;

  // Typed getters. Errors: NOT_FOUND when the key is absent,
  // INVALID_ARGUMENT "... is uint32, not string" when its type differs (no
  // conversions between types).
  absl::StatusOr<absl::string_view> GetString(absl::string_view key) const;
  absl::StatusOr<uint32_t> GetUint32(absl::string_view key) const;
  absl::StatusOr<int32_t> GetInt32(absl::string_view key) const;
  absl::StatusOr<uint64_t> GetUint64(absl::string_view key) const;
  absl::StatusOr<float> GetFloat32(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  // Any scalar type T of GgufValue (not GgufArray).
  template <typename T>
  absl::StatusOr<T> Get(absl::string_view key) const;
  // The array at `key` with elements of type T (e.g. std::string, float).
  // The pointer lives as long as the file.
  template <typename T>
  absl::StatusOr<const std::vector<T>*> GetArray(absl::string_view key) const;

 private:
  class Mapping;
  class Parser;

  GgufFile() = default;

  // NOT_FOUND for a missing key; INVALID_ARGUMENT for a wrong type.
  absl::StatusOr<const GgufValue*> FindTyped(absl::string_view key,
                                             GgufValueType want) const;
  absl::StatusOr<const GgufArray*> FindArray(absl::string_view key,
                                             GgufValueType element) const;

  // Constant after parsing.
  std::unique_ptr<Mapping> mapping_;  // owns the mapped file, if any
  std::vector<uint8_t> copy_;         // owns the bytes of FromBytes
  absl::Span<const uint8_t> bytes_;   // the whole file
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> kv_index_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

template <typename T>
absl::StatusOr<T> GgufFile::Get(absl::string_view key) const {
  absl::StatusOr<const GgufValue*> value = FindTyped(key, GgufTypeOf<T>::value);
  if (!value.ok()) return value.status();
  return std::get<T>(**value);
}

template <typename T>
absl::StatusOr<const std::vector<T>*> GgufFile::GetArray(
    absl::string_view key) const {
  absl::StatusOr<const GgufArray*> array = FindArray(key, GgufTypeOf<T>::value);
  if (!array.ok()) return array.status();
  return &std::get<std::vector<T>>(**array);
}

}  // namespace tessera

#endif  // TESSERA_MODEL_GGUF_READER_H_
