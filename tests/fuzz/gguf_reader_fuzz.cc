// Fuzzes the GGUF reader (model/gguf_reader.h) on hostile files. Checked,
// beyond "no crash": every tensor a parsed file lists has its data inside
// the file's data section, and its lookups by name and the metadata lookups
// answer without reading outside the bytes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/types/span.h"
#include "model/gguf_reader.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tessera::GgufFile::FromBytes(absl::MakeConstSpan(data, size));
  if (!file.ok()) return 0;
  const absl::Span<const uint8_t> bytes = (*file)->bytes();
  Check((*file)->data_offset() <= bytes.size());
  for (const tessera::GgufTensor& t : (*file)->tensors()) {
    Check((*file)->FindTensor(t.name) == &t);
    Check(t.NumElements() >= 0);
    if (t.num_bytes.has_value()) {
      Check(t.data.size() == *t.num_bytes);
      Check(t.data.empty() || (t.data.data() >= bytes.data() + (*file)->data_offset() &&
                               t.data.data() + t.data.size() <= bytes.data() + bytes.size()));
    }
    (void)t.TesseraType();
  }
  for (const tessera::GgufKv& kv : (*file)->kvs()) {
    Check((*file)->Find(kv.key) == &kv.value);
    (void)(*file)->GetString(kv.key);
    (void)(*file)->GetUint32(kv.key);
    (void)(*file)->GetFloat32(kv.key);
  }
  return 0;
}
