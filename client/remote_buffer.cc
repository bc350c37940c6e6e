#include "client/remote_buffer.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "client/remote_device.h"
#include "proto/split_state_codec.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace tessera::client {
namespace {

// `t` (contiguous) with `split`, as the daemon is told it.
v1::TensorLayout LayoutOf(const Tensor& t, const SplitState& split) {
  return wire::ToProto(wire::TensorLayout{
      .type = t.type,
      .ne = {t.ne, t.ne + kMaxDims},
      .split = split,
  });
}

// Synthetic addresses start high and leave a gap after each buffer, so a
// pointer one past a buffer's end never falls into the next.
uintptr_t NextBase(size_t size) {
  static std::atomic<uintptr_t> next{uintptr_t{1} << 44};
  constexpr uintptr_t kGap = uintptr_t{1} << 20;
  const uintptr_t span = (size + 2 * kGap - 1) / kGap * kGap;
  return next.fetch_add(span);
}

}  // namespace

RemoteBufferType::RemoteBufferType(RemoteDevice& device, Client& client,
                                   const wire::DeviceDescription& info)
    : device_(device),
      client_(client),
      device_name_(info.props.name),
      name_(info.buffer_types.empty() ? info.props.name
                                      : info.buffer_types[0].name),
      alignment_(info.buffer_types.empty() ? 64
                                           : info.buffer_types[0].alignment),
      max_size_(info.buffer_types.empty() ? 0 : info.buffer_types[0].max_size) {
}

Device& RemoteBufferType::device() { return device_; }

absl::StatusOr<std::unique_ptr<Buffer>> RemoteBufferType::Alloc(size_t size) {
  TESSERA_ASSIGN_OR_RETURN(
      RemoteBufferInfo info,
      client_.AllocBuffer(device_name_, size, BufferUsage::kWeights));
  return std::make_unique<RemoteBuffer>(*this, client_, info);
}

absl::StatusOr<std::unique_ptr<Buffer>> RemoteBufferType::AllocPlaced(
    size_t size, absl::Span<const TensorPlacement> placements) {
  std::vector<v1::PlacedTensor> placed;
  for (const TensorPlacement& p : placements) {
    TESSERA_ASSIGN_OR_RETURN(std::optional<SplitState> split,
                             device_.PolicySplit(*p.tensor));
    // Without a policy the daemon cannot lay the tensors out.
    if (!split.has_value()) return Alloc(size);
    v1::PlacedTensor& placed_tensor = placed.emplace_back();
    placed_tensor.set_offset(p.offset);
    *placed_tensor.mutable_layout() = LayoutOf(*p.tensor, *split);
  }
  TESSERA_ASSIGN_OR_RETURN(
      RemoteBufferInfo info,
      client_.AllocBuffer(device_name_, size, BufferUsage::kWeights, "",
                          placed));
  return std::make_unique<RemoteBuffer>(*this, client_, info);
}

RemoteBuffer::RemoteBuffer(RemoteBufferType& type, Client& client,
                           const RemoteBufferInfo& info)
    : Buffer(type, info.size),
      client_(client),
      handle_(info.handle),
      base_(NextBase(info.size)) {}

RemoteBuffer::~RemoteBuffer() {
  if (absl::Status s = client_.FreeBuffer(handle_); !s.ok()) {
    spdlog::warn("freeing remote buffer {}: {}", handle_, s.ToString());
  }
}

v1::TensorRef RemoteBuffer::At(size_t offset) const {
  v1::TensorRef ref;
  ref.set_buffer(handle_);
  ref.set_offset(offset);
  return ref;
}

absl::StatusOr<v1::TensorRef> RemoteBuffer::RefOf(const Tensor& t) {
  TESSERA_ASSIGN_OR_RETURN(size_t offset, OffsetOf(t));
  return At(offset);
}

absl::StatusOr<bool> RemoteBuffer::IsSplit(const Tensor& t) {
  TESSERA_ASSIGN_OR_RETURN(std::optional<SplitState> split, SplitOf(t));
  return split.has_value() && !(*split == SplitState::Mirrored());
}

absl::StatusOr<bool> RemoteBuffer::CopyFrom(const Tensor& src, Tensor& dst) {
  auto* from = dynamic_cast<RemoteBuffer*>(src.buffer);
  if (from == nullptr || &from->client_ != &client_) return false;
  TESSERA_ASSIGN_OR_RETURN(v1::TensorRef src_ref, from->RefOf(src));
  TESSERA_ASSIGN_OR_RETURN(v1::TensorRef dst_ref, RefOf(dst));
  TESSERA_RETURN_IF_ERROR(
      client_.CopyTensor(src_ref, dst_ref, dst.NumBytes()));
  return true;
}

absl::Status RemoteBuffer::DoWrite(size_t offset, const void* data,
                                   size_t size) {
  return client_.WriteTensor(At(offset), data, size);
}

absl::Status RemoteBuffer::DoRead(size_t offset, void* data, size_t size) {
  return client_.ReadTensor(At(offset), data, size);
}

absl::StatusOr<std::optional<SplitState>> RemoteBuffer::SplitOf(
    const Tensor& t) {
  auto& device = static_cast<RemoteDevice&>(type().device());
  return device.SplitOf(t, *this);
}

absl::Status RemoteBuffer::DoSetTensor(Tensor& t, size_t base_offset,
                                       const void* data, size_t offset,
                                       size_t size) {
  TESSERA_ASSIGN_OR_RETURN(std::optional<SplitState> split, SplitOf(t));
  const bool whole = offset == 0 && size == t.NumBytes() && t.IsContiguous();
  if (split.has_value() && whole) {
    const v1::TensorLayout layout = LayoutOf(t, *split);
    return client_.WriteTensor(At(base_offset), data, size,
                               {.layout = &layout});
  }
  if (split.has_value() && !(*split == SplitState::Mirrored())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[RemoteBuffer] ", Describe(t), " is ", split->ToString(),
        " over the daemon's members: write it whole and contiguous"));
  }
  return Buffer::DoSetTensor(t, base_offset, data, offset, size);
}

absl::Status RemoteBuffer::DoGetTensor(const Tensor& t, size_t base_offset,
                                       void* data, size_t offset,
                                       size_t size) {
  TESSERA_ASSIGN_OR_RETURN(std::optional<SplitState> split, SplitOf(t));
  if (!split.has_value() || *split == SplitState::Mirrored()) {
    return Buffer::DoGetTensor(t, base_offset, data, offset, size);
  }
  if (offset != 0 || size != t.NumBytes() || !t.IsContiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[RemoteBuffer] ", Describe(t), " is ", split->ToString(),
        " over the daemon's members: read it whole and contiguous"));
  }
  const v1::TensorLayout layout = LayoutOf(t, *split);
  return client_.ReadTensor(At(base_offset), data, size, &layout);
}

absl::Status RemoteBuffer::DoMemset(size_t offset, uint8_t value,
                                    size_t size) {
  return client_.MemsetTensor(At(offset), value, size);
}

}  // namespace tessera::client
