#include "model/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "model/ggml_type.h"

namespace tessera {

// Values are written with memcpy.
static_assert(std::endian::native == std::endian::little,
              "the GGUF writer assumes a little-endian host");

namespace {

using Sink = absl::FunctionRef<void(const void*, size_t)>;

template <typename T>
void Put(Sink sink, T value) {
  sink(&value, sizeof(value));
}

void PutString(Sink sink, absl::string_view s) {
  Put<uint64_t>(sink, s.size());
  sink(s.data(), s.size());
}

// A scalar or string value, without its type.
template <typename T>
void PutValue(Sink sink, const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    PutString(sink, value);
  } else if constexpr (std::is_same_v<T, bool>) {
    Put<uint8_t>(sink, value ? 1 : 0);
  } else {
    Put<T>(sink, value);
  }
}

void PutArray(Sink sink, const GgufArray& array) {
  Put<uint32_t>(sink, static_cast<uint32_t>(ElementTypeOf(array)));
  Put<uint64_t>(sink, ArrayLength(array));
  std::visit(
      [&](const auto& values) {
        for (const auto& v : values) {
          // Elements of std::vector<bool> are proxies.
          using T = typename std::decay_t<decltype(values)>::value_type;
          PutValue<T>(sink, v);
        }
      },
      array);
}

// Zeros up to the next multiple of `alignment`; `sink` counts into
// `written`.
void PutPadding(Sink sink, const uint64_t& written, uint64_t alignment) {
  static constexpr uint8_t kZeros[64] = {};
  while (written % alignment != 0) {
    sink(kZeros,
         std::min<uint64_t>(alignment - written % alignment, sizeof(kZeros)));
  }
}

uint64_t AlignUp(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

absl::Status GgufWriter::AddKv(std::string key, GgufValue value) {
  if (key.empty()) {
    return absl::InvalidArgumentError("[GgufWriter] empty key");
  }
  if (keys_.contains(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("[GgufWriter] duplicate key \"", key, "\""));
  }
  if (key == "general.alignment") {
    const uint32_t* alignment = std::get_if<uint32_t>(&value);
    if (alignment == nullptr || !std::has_single_bit(*alignment)) {
      return absl::InvalidArgumentError(
          "[GgufWriter] general.alignment must be a uint32 power of two");
    }
    alignment_ = *alignment;
  }
  keys_.insert(key);
  kvs_.emplace_back(std::move(key), std::move(value));
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(std::string name, int32_t ggml_type,
                                   absl::Span<const int64_t> ne,
                                   absl::Span<const uint8_t> data) {
  const std::string where = absl::StrCat("[GgufWriter] tensor \"", name, "\"");
  if (name.empty() || name.size() >= kGgufMaxTensorName) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": names must have 1 to ", kGgufMaxTensorName - 1, " bytes"));
  }
  if (names_.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": duplicate name"));
  }
  if (ne.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", ne.size(), " dimensions (at most 4)"));
  }
  absl::StatusOr<std::optional<uint64_t>> num_bytes =
      GgmlNumBytes(ggml_type, ne);
  if (!num_bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", num_bytes.status().message()));
  }
  if (num_bytes->has_value() && **num_bytes != data.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", data.size(), " bytes of data, ", GgmlTypeName(ggml_type),
        " of this shape needs ", **num_bytes));
  }
  names_.insert(name);
  tensors_.push_back(Tensor{std::move(name), ggml_type,
                            std::vector<int64_t>(ne.begin(), ne.end()),
                            std::vector<uint8_t>(data.begin(), data.end())});
  return absl::OkStatus();
}

void GgufWriter::Serialize(Sink sink) const {
  uint64_t written = 0;
  auto counted = [&](const void* data, size_t size) {
    sink(data, size);
    written += size;
  };
  Sink out(counted);

  // 1. Header.
  out("GGUF", 4);
  Put<uint32_t>(out, version_);
  Put<uint64_t>(out, tensors_.size());
  Put<uint64_t>(out, kvs_.size());
  // 2. Key/value pairs.
  for (const auto& [key, value] : kvs_) {
    PutString(out, key);
    Put<uint32_t>(out, static_cast<uint32_t>(TypeOf(value)));
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, GgufArray>) {
            PutArray(out, v);
          } else {
            PutValue<T>(out, v);
          }
        },
        value);
  }
  // 3. Tensor infos, offsets in the order added.
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(out, t.name);
    Put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) Put<uint64_t>(out, static_cast<uint64_t>(n));
    Put<int32_t>(out, t.ggml_type);
    Put<uint64_t>(out, offset);
    offset = AlignUp(offset + t.data.size(), alignment_);
  }
  // 4. Data, each tensor padded to the alignment (as ggml writes it).
  if (!tensors_.empty()) PutPadding(out, written, alignment_);
  for (const Tensor& t : tensors_) {
    out(t.data.data(), t.data.size());
    PutPadding(out, written, alignment_);
  }
}

std::vector<uint8_t> GgufWriter::WriteToBytes() const {
  std::vector<uint8_t> bytes;
  Serialize([&](const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + size);
  });
  return bytes;
}

absl::Status GgufWriter::WriteToFile(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("[GgufWriter] open ", path));
  }
  int write_errno = 0;
  Serialize([&](const void* data, size_t size) {
    if (write_errno == 0 && size > 0 && std::fwrite(data, 1, size, f) != size) {
      write_errno = errno != 0 ? errno : EIO;
    }
  });
  const bool closed = std::fclose(f) == 0;
  if (write_errno != 0) {
    return absl::ErrnoToStatus(write_errno,
                               absl::StrCat("[GgufWriter] write ", path));
  }
  if (!closed) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("[GgufWriter] close ", path));
  }
  return absl::OkStatus();
}

}  // namespace tessera
