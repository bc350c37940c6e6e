#include "server/decoding/split_tensor.h"

#include <optional>
#include <string>

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

}  // namespace

absl::Status PlaceSplit(Tensor& t, const SplitState& state) {
  TESSERA_ASSIGN_OR_RETURN(MetaBuffer * meta, AsMeta(t.buffer));
  TESSERA_RETURN_IF_ERROR(ValidateSplit(state, t, meta->n_members()));
  if (std::optional<SplitState> written = meta->RecordedState(t);
      written.has_value() && !(*written == state)) {
    return absl::InvalidArgumentError(
        absl::StrCat("split state ", state.ToString(),
                     " is not the one its data has: ", written->ToString()));
  }
  meta->RecordState(t, state);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> SplitWriteTarget(Buffer& buffer, size_t offset,
                                        size_t size,
                                        const v1::TensorLayout& def) {
  TESSERA_ASSIGN_OR_RETURN(wire::TensorLayout layout, wire::FromProto(def));
  TESSERA_ASSIGN_OR_RETURN(MetaBuffer * meta, AsMeta(&buffer));
  Tensor t;
  t.type = layout.type;
  for (size_t d = 0; d < layout.ne.size(); ++d) t.ne[d] = layout.ne[d];
  ContiguousStrides(t.type, t.ne, t.nb);
  if (t.ne[0] % Traits(t.type).block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout: ne[0] = ", t.ne[0], " is not whole blocks of ",
                     std::string(TypeName(t.type))));
  }
  const std::optional<size_t> bytes = CheckedNumBytes(t);
  if (!bytes.has_value() || *bytes != size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout: a tensor of ", bytes.has_value() ? *bytes : 0, " bytes (",
        Describe(t), ") for a write of ", size, " bytes"));
  }
  t.buffer = meta;
  t.data = static_cast<char*>(meta->base()) + offset;
  TESSERA_RETURN_IF_ERROR(ValidateSplit(layout.split, t, meta->n_members()));
  meta->RecordState(t, layout.split);
  return t;
}

absl::Status WriteBytes(Buffer& buffer, size_t offset,
                        std::optional<Tensor>& split, size_t done,
                        const void* data, size_t size) {
  if (split.has_value()) return buffer.SetTensor(*split, data, done, size);
  return buffer.Write(offset + done, data, size);
}

}  // namespace tessera::server
