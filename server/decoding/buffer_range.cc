#include "server/decoding/buffer_range.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::server {
namespace {

// A 1-D I32 tensor over [offset, offset + size) of `buffer` (size a multiple
// of 4), so that device copies between buffers can go through
// Buffer::CopyFrom.
Tensor RangeTensor(Buffer& buffer, size_t offset, size_t size) {
  Tensor t;
  t.type = Type::kI32;
  t.ne[0] = static_cast<int64_t>(size / sizeof(int32_t));
  ContiguousStrides(t.type, t.ne, t.nb);
  t.buffer = &buffer;
  t.data = static_cast<char*>(buffer.base()) + offset;
  return t;
}

}  // namespace

absl::StatusOr<BufferRange> ResolveRange(const Session& session,
                                         absl::string_view what,
                                         uint64_t handle, uint64_t offset,
                                         uint64_t size) {
  absl::StatusOr<std::shared_ptr<Buffer>> buffer = session.FindBuffer(handle);
  if (!buffer.ok()) {
    return absl::Status(buffer.status().code(),
                        absl::StrCat(what, ": ", buffer.status().message()));
  }
  const uint64_t limit = (*buffer)->size();
  if (offset > limit || size > limit - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": range of ", size, " bytes at offset ", offset,
        " is outside buffer ", handle, " of ", limit, " bytes"));
  }
  return BufferRange{*std::move(buffer), handle, static_cast<size_t>(offset),
                     static_cast<size_t>(size)};
}

// 1. Host source, other buffer: one write from the source's memory.
// 2. Same element size and another buffer: let the destination try a direct
//    device copy.
// 3. Otherwise stage through host memory piece by piece, last piece first
//    when the destination starts after the source inside one buffer.
absl::Status CopyRange(const BufferRange& src, const BufferRange& dst,
                       size_t staging_bytes) {
  if (src.size != dst.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("[CopyRange] source has ", src.size,
                     " bytes, destination ", dst.size));
  }
  const size_t size = src.size;
  if (size == 0) return absl::OkStatus();
  const bool same_buffer = src.buffer == dst.buffer;
  if (!same_buffer && src.buffer->type().is_host()) {
    return dst.buffer->Write(
        dst.offset, static_cast<const char*>(src.buffer->base()) + src.offset,
        size);
  }
  if (!same_buffer && size % sizeof(int32_t) == 0) {
    const Tensor from = RangeTensor(*src.buffer, src.offset, size);
    Tensor to = RangeTensor(*dst.buffer, dst.offset, size);
    absl::StatusOr<bool> copied = dst.buffer->CopyFrom(from, to);
    if (!copied.ok()) return copied.status();
    if (*copied) return absl::OkStatus();
  }
  const size_t piece = std::max<size_t>(std::min(size, staging_bytes), 1);
  std::vector<char> staging(piece);
  const bool backwards = same_buffer && dst.offset > src.offset;
  const size_t n_pieces = (size + piece - 1) / piece;
  for (size_t k = 0; k < n_pieces; ++k) {
    const size_t i = backwards ? n_pieces - 1 - k : k;
    const size_t at = i * piece;
    const size_t n = std::min(piece, size - at);
    if (absl::Status s = src.buffer->Read(src.offset + at, staging.data(), n);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = dst.buffer->Write(dst.offset + at, staging.data(), n);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::server
