#include "server/decoding/split_tensor.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/meta/meta_device.h"
#include "base/status_macros.h"
#include "proto/split_state_codec.h"

namespace tessera::server {
namespace {

// The meta buffer `buffer` is, or INVALID_ARGUMENT.
absl::StatusOr<MetaBuffer*> AsMeta(Buffer* buffer) {
  auto* meta = dynamic_cast<MetaBuffer*>(buffer);
  if (meta == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a split state for data on ", buffer->type().device().name(),
        ", which is not a meta device"));
  }
  return meta;
}

// A contiguous tensor of `layout`'s type and shape (no data), its rows
// whole blocks and its byte size representable.
absl::StatusOr<Tensor> LayoutTensor(const wire::TensorLayout& layout) {
  Tensor t;
  t.type = layout.type;
  for (size_t d = 0; d < layout.ne.size(); ++d) t.ne[d] = layout.ne[d];
  ContiguousStrides(t.type, t.ne, t.nb);
  if (t.ne[0] % Traits(t.type).block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout: ne[0] = ", t.ne[0], " is not whole blocks of ",
                     std::string(TypeName(t.type))));
  }
  if (!CheckedNumBytes(t).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout: ", Describe(t), " has too many bytes"));
  }
  return t;
}

// The tensor of layout `def` at `offset` of meta buffer `buffer`, `size`
// bytes, its split fitting the device; and that split.
absl::StatusOr<std::pair<Tensor, SplitState>> LaidOutAt(
    Buffer& buffer, size_t offset, size_t size, const v1::TensorLayout& def,
    absl::string_view transfer) {
  TESSERA_ASSIGN_OR_RETURN(wire::TensorLayout layout, wire::FromProto(def));
  TESSERA_ASSIGN_OR_RETURN(MetaBuffer * meta, AsMeta(&buffer));
  TESSERA_ASSIGN_OR_RETURN(Tensor t, LayoutTensor(layout));
  if (t.NumBytes() != size) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout: a tensor of ", t.NumBytes(), " bytes (",
                     Describe(t), ") for a ", transfer, " of ", size,
                     " bytes"));
  }
  t.buffer = meta;
  t.data = static_cast<char*>(meta->base()) + offset;
  TESSERA_RETURN_IF_ERROR(ValidateSplit(layout.split, t, meta->n_members()));
  return std::make_pair(t, layout.split);
}


}  // namespace

absl::StatusOr<std::unique_ptr<Buffer>> AllocPacked(
    BufferType& type, size_t size,
    const google::protobuf::RepeatedPtrField<v1::PlacedTensor>& placed) {
  auto* meta = dynamic_cast<MetaBufferType*>(&type);
  if (meta == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placed tensors for a buffer of ", std::string(type.name()),
        ", which is not a meta device's memory"));
  }
  if (placed.size() > kMaxPlacedTensors) {
    return absl::InvalidArgumentError(absl::StrCat(
        placed.size(), " placed tensors, more than ", kMaxPlacedTensors));
  }
  const int n = meta->meta_device().size();
  std::vector<Tensor> tensors(placed.size());
  std::vector<MetaBufferType::PackedTensor> packed;
  for (int k = 0; k < placed.size(); ++k) {
    const v1::PlacedTensor& p = placed[k];
    const std::string where = absl::StrCat("placed tensor ", k, ": ");
    absl::StatusOr<wire::TensorLayout> layout = wire::FromProto(p.layout());
    absl::StatusOr<Tensor> t =
        layout.ok() ? LayoutTensor(*layout) : layout.status();
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, t.status().message()));
    }
    tensors[k] = *std::move(t);
    const size_t bytes = tensors[k].NumBytes();
    if (p.offset() % type.alignment() != 0 || p.offset() > size ||
        bytes > size - p.offset()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, Describe(tensors[k]), " at offset ", p.offset(),
          " is not aligned to ", type.alignment(),
          " or not inside the buffer of ", size, " bytes"));
    }
    if (absl::Status s = ValidateSplit(layout->split, tensors[k], n); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, s.message()));
    }
    packed.push_back({&tensors[k], p.offset(), layout->split});
  }
  // No two tensors share a byte.
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& p : packed) {
    ranges.emplace_back(p.offset, p.offset + p.tensor->NumBytes());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k) {
    if (ranges[k].first < ranges[k - 1].second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placed tensors overlap at offset ", ranges[k].first));
    }
  }
  return meta->AllocPacked(size, packed);
}

absl::Status PlaceSplit(Tensor& t, const SplitState& state) {
  TESSERA_ASSIGN_OR_RETURN(MetaBuffer * meta, AsMeta(t.buffer));
  TESSERA_RETURN_IF_ERROR(ValidateSplit(state, t, meta->n_members()));
  if (std::optional<SplitState> written = meta->RecordedState(t);
      written.has_value() && !(*written == state)) {
    return absl::InvalidArgumentError(
        absl::StrCat("split state ", state.ToString(),
                     " is not the one its data has: ", written->ToString()));
  }
  return meta->RecordState(t, state);
}

absl::StatusOr<Tensor> SplitWriteTarget(Buffer& buffer, size_t offset,
                                        size_t size,
                                        const v1::TensorLayout& def) {
  TESSERA_ASSIGN_OR_RETURN(auto laid_out,
                           LaidOutAt(buffer, offset, size, def, "write"));
  auto& [t, split] = laid_out;
  TESSERA_RETURN_IF_ERROR(
      static_cast<MetaBuffer*>(t.buffer)->RecordState(t, split));
  return t;
}

absl::StatusOr<Tensor> SplitReadSource(Buffer& buffer, size_t offset,
                                       size_t size,
                                       const v1::TensorLayout& def) {
  TESSERA_ASSIGN_OR_RETURN(auto laid_out,
                           LaidOutAt(buffer, offset, size, def, "read"));
  auto& [t, split] = laid_out;
  const std::optional<SplitState> written =
      static_cast<MetaBuffer*>(t.buffer)->RecordedState(t);
  if (!written.has_value() || !(*written == split)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout: ", Describe(t), " was not written ", split.ToString(),
        written.has_value() ? absl::StrCat(" but ", written->ToString())
                            : std::string(" at this offset")));
  }
  return t;
}

absl::Status WriteBytes(Buffer& buffer, size_t offset,
                        std::optional<Tensor>& split, size_t done,
                        const void* data, size_t size) {
  if (split.has_value()) return buffer.SetTensor(*split, data, done, size);
  return buffer.Write(offset + done, data, size);
}

}  // namespace tessera::server
