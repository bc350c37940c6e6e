#include "model/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/ggml_type.h"

namespace tessera {

// Values are copied out of the file with memcpy.
static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
// The smallest KV pair: key length, a one-byte key, value type, one byte.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
// The smallest tensor info: name length, n_dims, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
// The smallest array element of each kind.
constexpr uint64_t kMinStringBytes = 8;
// How much of a name from the file error messages show.
constexpr size_t kMaxShownName = 64;

// `s` quoted and escaped for an error message, cut at kMaxShownName bytes.
std::string Quote(absl::string_view s) {
  const bool cut = s.size() > kMaxShownName;
  return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMaxShownName)),
                      cut ? "\"..." : "\"");
}

}  // namespace

// A read-only private mapping of a whole file; unmapped on destruction.
class GgufFile::Mapping {
 public:
  static absl::StatusOr<std::unique_ptr<Mapping>> Map(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::ErrnoToStatus(errno, "open");
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return absl::ErrnoToStatus(err, "fstat");
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError("not a regular file");
    }
    auto mapping = std::unique_ptr<Mapping>(new Mapping());
    mapping->size_ = static_cast<size_t>(st.st_size);
    if (mapping->size_ > 0) {
      void* addr =
          ::mmap(nullptr, mapping->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (addr == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        return absl::ErrnoToStatus(err, "mmap");
      }
      mapping->addr_ = addr;
    }
    ::close(fd);  // The mapping keeps the file.
    return mapping;
  }

  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr_ != nullptr) ::munmap(addr_, size_);
  }

  absl::Span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(addr_), size_};
  }

 private:
  Mapping() = default;

  void* addr_ = nullptr;
  size_t size_ = 0;
};

// Parses file->bytes_ into the file's fields, in the order of the format:
// 1. magic and version, 2. counts, 3. KV pairs, 4. the alignment,
// 5. tensor infos, 6. the data section and each tensor's range in it.
// Error messages leave out the "[GGUF] " prefix; the callers add it.
class GgufFile::Parser {
 public:
  explicit Parser(GgufFile* file) : file_(file), bytes_(file->bytes_) {}

  absl::Status Parse() {
    TESSERA_RETURN_IF_ERROR(ParseHeader());
    uint64_t n_tensors = 0, n_kv = 0;
    TESSERA_RETURN_IF_ERROR(ReadCount(&n_tensors, "tensor count",
                                      kMinTensorInfoBytes, "tensor info"));
    TESSERA_RETURN_IF_ERROR(
        ReadCount(&n_kv, "KV count", kMinKvBytes, "key/value pair"));
    file_->kvs_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) TESSERA_RETURN_IF_ERROR(ParseKv(i));
    TESSERA_RETURN_IF_ERROR(ParseAlignment());
    if (n_tensors > left() / kMinTensorInfoBytes) {
      return Error(
          absl::StatusCode::kDataLoss, "header",
          absl::StrCat("tensor count ", n_tensors, " needs at least ",
                       kMinTensorInfoBytes, " bytes per tensor info but only ",
                       left(), " bytes are left after the metadata"));
    }
    file_->tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      TESSERA_RETURN_IF_ERROR(ParseTensorInfo(i));
    }
    return PlaceData();
  }

 private:
  size_t left() const { return bytes_.size() - pos_; }

  // An error about `where` (an item: "header", "key 3 (\"name\")") at the
  // current read position: the start of the field at fault, or for
  // truncations the end of what was read.
  absl::Status Error(absl::StatusCode code, absl::string_view where,
                     absl::string_view message) const {
    return absl::Status(
        code, absl::StrCat(where, ": ", message, " (at byte ", pos_, ")"));
  }
  // An error about the data section, where no read position applies.
  static absl::Status DataError(absl::StatusCode code, absl::string_view where,
                                absl::string_view message) {
    return absl::Status(code, absl::StrCat(where, ": ", message));
  }

  // Reads `n` raw bytes into `dst`.
  absl::Status ReadBytes(void* dst, size_t n, absl::string_view where,
                         absl::string_view what) {
    if (n > left()) {
      return Error(absl::StatusCode::kDataLoss, where,
                   absl::StrCat(what, " needs ", n, " bytes but only ", left(),
                                " are left"));
    }
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status Read(T* out, absl::string_view where, absl::string_view what) {
    return ReadBytes(out, sizeof(T), where, what);
  }

  // A string; `what` names it ("key", "name", "value", "element"), with
  // `index` appended when it is not negative.
  absl::Status ReadString(std::string* out, absl::string_view where,
                          absl::string_view what, int64_t index = -1) {
    auto label = [&] {
      return index < 0 ? std::string(what) : absl::StrCat(what, " ", index);
    };
    uint64_t length = 0;
    if (left() < sizeof(length)) {
      return Error(absl::StatusCode::kDataLoss, where,
                   absl::StrCat(label(),
                                ": the string length needs 8 bytes "
                                "but only ",
                                left(), " are left"));
    }
    std::memcpy(&length, bytes_.data() + pos_, sizeof(length));
    pos_ += sizeof(length);
    if (length > left()) {
      const size_t bytes_left = left();
      pos_ -= sizeof(length);
      return Error(absl::StatusCode::kDataLoss, where,
                   absl::StrCat(label(), ": string length ", length,
                                " exceeds the ", bytes_left, " bytes left"));
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return absl::OkStatus();
  }

  // 1. Magic and version.
  absl::Status ParseHeader() {
    char magic[4];
    TESSERA_RETURN_IF_ERROR(ReadBytes(magic, 4, "header", "the magic"));
    if (std::memcmp(magic, kMagic, 4) != 0) {
      pos_ = 0;
      return Error(absl::StatusCode::kInvalidArgument, "header",
                   absl::StrCat("bad magic ",
                                Quote(absl::string_view(magic, sizeof(magic))),
                                ", expected \"GGUF\""));
    }
    uint32_t version = 0;
    TESSERA_RETURN_IF_ERROR(Read(&version, "header", "the version"));
    pos_ -= sizeof(version);
    if (version != 0 && (version & 0xFFFFu) == 0) {
      return Error(absl::StatusCode::kInvalidArgument, "header",
                   absl::StrCat("version 0x", absl::Hex(version),
                                " looks byte-swapped: big-endian GGUF files "
                                "are not supported"));
    }
    if (version == 1) {
      return Error(absl::StatusCode::kInvalidArgument, "header",
                   "GGUF version 1 is not supported (only 2 and 3)");
    }
    if (version != 2 && version != 3) {
      return Error(absl::StatusCode::kInvalidArgument, "header",
                   absl::StrCat("unsupported GGUF version ", version,
                                " (only 2 and 3)"));
    }
    pos_ += sizeof(version);
    file_->version_ = version;
    return absl::OkStatus();
  }

  // 2. A count of items that take at least `min_bytes` each.
  absl::Status ReadCount(uint64_t* count, absl::string_view what,
                         uint64_t min_bytes, absl::string_view item) {
    TESSERA_RETURN_IF_ERROR(Read(count, "header", what));
    if (*count > left() / min_bytes) {
      const size_t bytes_left = left();
      pos_ -= sizeof(*count);
      return Error(absl::StatusCode::kDataLoss, "header",
                   absl::StrCat(what, " ", *count, " needs at least ",
                                min_bytes, " bytes per ", item, " but only ",
                                bytes_left, " bytes are left"));
    }
    return absl::OkStatus();
  }

  // 3. Key/value pair `i`.
  absl::Status ParseKv(uint64_t i) {
    GgufKv kv;
    TESSERA_RETURN_IF_ERROR(
        ReadString(&kv.key, absl::StrCat("key ", i), "key"));
    const std::string where = absl::StrCat("key ", i, " (", Quote(kv.key), ")");
    if (kv.key.empty()) {
      return Error(absl::StatusCode::kInvalidArgument, where, "empty key");
    }
    if (file_->kv_index_.contains(kv.key)) {
      return Error(absl::StatusCode::kInvalidArgument, where,
                   absl::StrCat("duplicate key (first at key ",
                                file_->kv_index_.at(kv.key), ")"));
    }
    uint32_t type = 0;
    TESSERA_RETURN_IF_ERROR(Read(&type, where, "the value type"));
    if (!IsValidGgufValueType(type)) {
      return Error(absl::StatusCode::kInvalidArgument, where,
                   absl::StrCat("unknown value type ", type));
    }
    if (static_cast<GgufValueType>(type) == GgufValueType::kArray) {
      GgufArray array;
      TESSERA_RETURN_IF_ERROR(ReadArray(&array, where));
      kv.value = std::move(array);
    } else {
      TESSERA_RETURN_IF_ERROR(
          ReadScalar(static_cast<GgufValueType>(type), &kv.value, where));
    }
    file_->kv_index_.emplace(kv.key, file_->kvs_.size());
    file_->kvs_.push_back(std::move(kv));
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status ReadScalarAs(GgufValue* out, absl::string_view where) {
    T value;
    TESSERA_RETURN_IF_ERROR(Read(&value, where, "the value"));
    *out = value;
    return absl::OkStatus();
  }

  // A value of scalar or string type `type`.
  absl::Status ReadScalar(GgufValueType type, GgufValue* out,
                          absl::string_view where) {
    switch (type) {
      case GgufValueType::kUint8:
        return ReadScalarAs<uint8_t>(out, where);
      case GgufValueType::kInt8:
        return ReadScalarAs<int8_t>(out, where);
      case GgufValueType::kUint16:
        return ReadScalarAs<uint16_t>(out, where);
      case GgufValueType::kInt16:
        return ReadScalarAs<int16_t>(out, where);
      case GgufValueType::kUint32:
        return ReadScalarAs<uint32_t>(out, where);
      case GgufValueType::kInt32:
        return ReadScalarAs<int32_t>(out, where);
      case GgufValueType::kFloat32:
        return ReadScalarAs<float>(out, where);
      case GgufValueType::kUint64:
        return ReadScalarAs<uint64_t>(out, where);
      case GgufValueType::kInt64:
        return ReadScalarAs<int64_t>(out, where);
      case GgufValueType::kFloat64:
        return ReadScalarAs<double>(out, where);
      case GgufValueType::kBool: {
        uint8_t byte = 0;
        TESSERA_RETURN_IF_ERROR(Read(&byte, where, "the value"));
        *out = byte != 0;
        return absl::OkStatus();
      }
      case GgufValueType::kString: {
        std::string s;
        TESSERA_RETURN_IF_ERROR(ReadString(&s, where, "value"));
        *out = std::move(s);
        return absl::OkStatus();
      }
      case GgufValueType::kArray:
        break;
    }
    return Error(absl::StatusCode::kInternal, where, "not a scalar type");
  }

  // `n` elements of fixed-size type T; the caller checked that they fit.
  template <typename T>
  void ReadFixedArray(uint64_t n, GgufArray* out) {
    std::vector<T> values(n);
    if (n > 0) std::memcpy(values.data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    *out = std::move(values);
  }

  // An array value: element type, count, elements.
  absl::Status ReadArray(GgufArray* out, absl::string_view where) {
    uint32_t type = 0;
    TESSERA_RETURN_IF_ERROR(Read(&type, where, "the array element type"));
    if (!IsValidGgufValueType(type)) {
      return Error(absl::StatusCode::kInvalidArgument, where,
                   absl::StrCat("unknown array element type ", type));
    }
    const auto element = static_cast<GgufValueType>(type);
    if (element == GgufValueType::kArray) {
      return Error(absl::StatusCode::kInvalidArgument, where,
                   "nested arrays are not supported");
    }
    uint64_t n = 0;
    TESSERA_RETURN_IF_ERROR(Read(&n, where, "the array length"));
    const uint64_t min_bytes = element == GgufValueType::kString
                                   ? kMinStringBytes
                                   : GgufValueTypeSize(element);
    if (n > left() / min_bytes) {
      const size_t bytes_left = left();
      pos_ -= sizeof(n);
      return Error(absl::StatusCode::kDataLoss, where,
                   absl::StrCat("array of ", n, " ", GgufValueTypeName(element),
                                " needs at least ", min_bytes,
                                " bytes per element but only ", bytes_left,
                                " bytes are left"));
    }
    switch (element) {
      case GgufValueType::kUint8:
        ReadFixedArray<uint8_t>(n, out);
        break;
      case GgufValueType::kInt8:
        ReadFixedArray<int8_t>(n, out);
        break;
      case GgufValueType::kUint16:
        ReadFixedArray<uint16_t>(n, out);
        break;
      case GgufValueType::kInt16:
        ReadFixedArray<int16_t>(n, out);
        break;
      case GgufValueType::kUint32:
        ReadFixedArray<uint32_t>(n, out);
        break;
      case GgufValueType::kInt32:
        ReadFixedArray<int32_t>(n, out);
        break;
      case GgufValueType::kFloat32:
        ReadFixedArray<float>(n, out);
        break;
      case GgufValueType::kUint64:
        ReadFixedArray<uint64_t>(n, out);
        break;
      case GgufValueType::kInt64:
        ReadFixedArray<int64_t>(n, out);
        break;
      case GgufValueType::kFloat64:
        ReadFixedArray<double>(n, out);
        break;
      case GgufValueType::kBool: {
        std::vector<bool> values(n);
        for (uint64_t j = 0; j < n; ++j) values[j] = bytes_[pos_ + j] != 0;
        pos_ += n;
        *out = std::move(values);
        break;
      }
      case GgufValueType::kString: {
        std::vector<std::string> values;
        values.reserve(n);
        for (uint64_t j = 0; j < n; ++j) {
          TESSERA_RETURN_IF_ERROR(ReadString(&values.emplace_back(), where,
                                             "element",
                                             static_cast<int64_t>(j)));
        }
        *out = std::move(values);
        break;
      }
      case GgufValueType::kArray:
        break;  // Refused above.
    }
    return absl::OkStatus();
  }

  // 4. general.alignment: a uint32 power of two when present.
  absl::Status ParseAlignment() {
    const GgufValue* value = file_->Find(kGgufAlignmentKey);
    if (value == nullptr) return absl::OkStatus();
    const std::string where = absl::StrCat("key ", Quote(kGgufAlignmentKey));
    if (TypeOf(*value) != GgufValueType::kUint32) {
      return Error(absl::StatusCode::kInvalidArgument, where,
                   absl::StrCat("must be uint32, not ",
                                GgufValueTypeName(TypeOf(*value))));
    }
    const uint32_t alignment = std::get<uint32_t>(*value);
    if (!std::has_single_bit(alignment)) {
      return Error(absl::StatusCode::kInvalidArgument, where,
                   absl::StrCat("alignment ", alignment,
                                " is not a non-zero power of two"));
    }
    file_->alignment_ = alignment;
    return absl::OkStatus();
  }

  // 5. Tensor info `i`.
  absl::Status ParseTensorInfo(uint64_t i) {
    GgufTensor t;
    TESSERA_RETURN_IF_ERROR(
        ReadString(&t.name, absl::StrCat("tensor ", i), "name"));
    const std::string where =
        absl::StrCat("tensor ", i, " (", Quote(t.name), ")");
    if (file_->tensor_index_.contains(t.name)) {
      return Error(absl::StatusCode::kInvalidArgument, where,
                   absl::StrCat("duplicate tensor name (first at tensor ",
                                file_->tensor_index_.at(t.name), ")"));
    }
    uint32_t n_dims = 0;
    TESSERA_RETURN_IF_ERROR(Read(&n_dims, where, "n_dims"));
    if (n_dims > kGgufMaxDims) {
      return Error(absl::StatusCode::kInvalidArgument, where,
                   absl::StrCat("n_dims ", n_dims, " exceeds ", kGgufMaxDims));
    }
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      TESSERA_RETURN_IF_ERROR(Read(&ne, where, absl::StrCat("ne[", d, "]")));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(absl::StatusCode::kInvalidArgument, where,
                     absl::StrCat("ne[", d, "] = ", ne, " exceeds INT64_MAX"));
      }
      t.ne[d] = static_cast<int64_t>(ne);
    }
    TESSERA_RETURN_IF_ERROR(Read(&t.ggml_type, where, "the ggml type"));
    TESSERA_RETURN_IF_ERROR(Read(&t.offset, where, "the data offset"));
    absl::StatusOr<std::optional<uint64_t>> num_bytes =
        GgmlNumBytes(t.ggml_type, t.ne);
    if (!num_bytes.ok()) {
      return Error(absl::StatusCode::kInvalidArgument, where,
                   num_bytes.status().message());
    }
    t.num_bytes = *num_bytes;
    if (absl::StatusOr<Type> type = TesseraTypeFromGgml(t.ggml_type);
        type.ok()) {
      t.type = *type;
    }
    file_->tensor_index_.emplace(t.name, file_->tensors_.size());
    file_->tensors_.push_back(std::move(t));
    return absl::OkStatus();
  }

  // 6. The data section (aligned after the infos when there are tensors)
  // and each tensor's range in it: aligned, inside the file, disjoint.
  absl::Status PlaceData() {
    const uint64_t alignment = file_->alignment_;
    uint64_t start = pos_;
    if (!file_->tensors_.empty()) {
      start = (start + alignment - 1) / alignment * alignment;
      if (start > bytes_.size()) {
        return DataError(absl::StatusCode::kDataLoss, "data section",
                         absl::StrCat("starts at byte ", start,
                                      ", past the end of "
                                      "the ",
                                      bytes_.size(), "-byte file"));
      }
    }
    pos_ = start;
    file_->data_offset_ = start;
    const uint64_t data_size = bytes_.size() - start;

    struct Range {
      uint64_t begin, end;
      size_t tensor;
    };
    std::vector<Range> ranges;
    for (size_t i = 0; i < file_->tensors_.size(); ++i) {
      GgufTensor& t = file_->tensors_[i];
      const std::string where =
          absl::StrCat("tensor ", i, " (", Quote(t.name), ")");
      if (t.offset % alignment != 0) {
        return DataError(
            absl::StatusCode::kInvalidArgument, where,
            absl::StrCat("data offset ", t.offset,
                         " is not a multiple of the alignment ", alignment));
      }
      if (t.offset > data_size) {
        return DataError(
            absl::StatusCode::kDataLoss, where,
            absl::StrCat("data offset ", t.offset, " is past the end of the ",
                         data_size, "-byte data section"));
      }
      if (!t.num_bytes.has_value()) continue;
      if (*t.num_bytes > data_size - t.offset) {
        return DataError(absl::StatusCode::kDataLoss, where,
                         absl::StrCat(*t.num_bytes, " bytes of data at offset ",
                                      t.offset, " run past the end of the ",
                                      data_size, "-byte data section"));
      }
      t.data = bytes_.subspan(start + t.offset, *t.num_bytes);
      if (*t.num_bytes > 0) {
        ranges.push_back({t.offset, t.offset + *t.num_bytes, i});
      }
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return a.begin < b.begin; });
    // The range reaching furthest so far; any later range that begins
    // before its end overlaps it.
    const Range* furthest = nullptr;
    for (const Range& r : ranges) {
      if (furthest != nullptr && r.begin < furthest->end) {
        const GgufTensor& a = file_->tensors_[furthest->tensor];
        const GgufTensor& b = file_->tensors_[r.tensor];
        return DataError(
            absl::StatusCode::kInvalidArgument, "data section",
            absl::StrCat("tensor ", furthest->tensor, " (", Quote(a.name),
                         ", bytes [", furthest->begin, ", ", furthest->end,
                         ")) overlaps tensor ", r.tensor, " (", Quote(b.name),
                         ", bytes [", r.begin, ", ", r.end, "))"));
      }
      if (furthest == nullptr || r.end > furthest->end) furthest = &r;
    }
    return absl::OkStatus();
  }

  GgufFile* const file_;
  const absl::Span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

absl::StatusOr<Type> GgufTensor::TesseraType() const {
  absl::StatusOr<Type> type = TesseraTypeFromGgml(ggml_type);
  if (!type.ok()) {
    return absl::Status(type.status().code(),
                        absl::StrCat("[GGUF] tensor ", Quote(name), ": ",
                                     type.status().message()));
  }
  return type;
}

GgufFile::~GgufFile() = default;

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(
    const std::string& path) {
  absl::StatusOr<std::unique_ptr<Mapping>> mapping = Mapping::Map(path);
  if (!mapping.ok()) {
    return absl::Status(
        mapping.status().code(),
        absl::StrCat("[GGUF] ", path, ": ", mapping.status().message()));
  }
  auto file = std::unique_ptr<GgufFile>(new GgufFile());
  file->mapping_ = *std::move(mapping);
  file->bytes_ = file->mapping_->bytes();
  if (absl::Status status = Parser(file.get()).Parse(); !status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("[GGUF] ", path, ": ", status.message()));
  }
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(
    absl::Span<const uint8_t> bytes) {
  auto file = std::unique_ptr<GgufFile>(new GgufFile());
  file->copy_.assign(bytes.begin(), bytes.end());
  file->bytes_ = file->copy_;
  if (absl::Status status = Parser(file.get()).Parse(); !status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("[GGUF] ", status.message()));
  }
  return file;
}

const GgufValue* GgufFile::Find(absl::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensor* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const GgufValue*> GgufFile::FindTyped(absl::string_view key,
                                                     GgufValueType want) const {
  const GgufValue* value = Find(key);
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat("[GGUF] no key ", Quote(key)));
  }
  if (TypeOf(*value) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[GGUF] key ", Quote(key), " is ", GgufValueTypeName(TypeOf(*value)),
        ", not ", GgufValueTypeName(want)));
  }
  return value;
}

absl::StatusOr<const GgufArray*> GgufFile::FindArray(
    absl::string_view key, GgufValueType element) const {
  TESSERA_ASSIGN_OR_RETURN(const GgufValue* value,
                           FindTyped(key, GgufValueType::kArray));
  const GgufArray& array = std::get<GgufArray>(*value);
  if (ElementTypeOf(array) != element) {
    return absl::InvalidArgumentError(
        absl::StrCat("[GGUF] key ", Quote(key), " is an array of ",
                     GgufValueTypeName(ElementTypeOf(array)), ", not of ",
                     GgufValueTypeName(element)));
  }
  return &array;
}

absl::StatusOr<absl::string_view> GgufFile::GetString(
    absl::string_view key) const {
  TESSERA_ASSIGN_OR_RETURN(const GgufValue* value,
                           FindTyped(key, GgufValueType::kString));
  return absl::string_view(std::get<std::string>(*value));
}

absl::StatusOr<uint32_t> GgufFile::GetUint32(absl::string_view key) const {
  return Get<uint32_t>(key);
}

absl::StatusOr<int32_t> GgufFile::GetInt32(absl::string_view key) const {
  return Get<int32_t>(key);
}

absl::StatusOr<uint64_t> GgufFile::GetUint64(absl::string_view key) const {
  return Get<uint64_t>(key);
}

absl::StatusOr<float> GgufFile::GetFloat32(absl::string_view key) const {
  return Get<float>(key);
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  return Get<bool>(key);
}

}  // namespace tessera
