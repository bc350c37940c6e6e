#include "backend/buffer.h"

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {

// Whether [offset, offset + size) lies inside [0, limit), without overflow.
bool RangeInside(size_t offset, size_t size, size_t limit) {
  return offset <= limit && size <= limit - offset;
}

absl::Status CheckRange(std::string_view where, size_t offset, size_t size,
                        size_t limit, std::string_view what) {
  if (!RangeInside(offset, size, limit)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[%s] range of %u bytes at offset %u is outside the %u bytes of %s",
        where, size, offset, limit, what));
  }
  return absl::OkStatus();
}

absl::Status CheckPointer(std::string_view where, const void* data,
                          size_t size) {
  if (data == nullptr && size > 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("[%s] null host pointer for %u bytes", where, size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Buffer::Write(size_t offset, const void* data, size_t size) {
  if (absl::Status s =
          CheckRange("Buffer::Write", offset, size, size_, "the buffer");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPointer("Buffer::Write", data, size); !s.ok()) {
    return s;
  }
  if (size == 0) return absl::OkStatus();
  return DoWrite(offset, data, size);
}

absl::Status Buffer::Read(size_t offset, void* data, size_t size) {
  if (absl::Status s =
          CheckRange("Buffer::Read", offset, size, size_, "the buffer");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPointer("Buffer::Read", data, size); !s.ok()) {
    return s;
  }
  if (size == 0) return absl::OkStatus();
  return DoRead(offset, data, size);
}

absl::Status Buffer::Memset(size_t offset, uint8_t value, size_t size) {
  if (absl::Status s =
          CheckRange("Buffer::Memset", offset, size, size_, "the buffer");
      !s.ok()) {
    return s;
  }
  if (size == 0) return absl::OkStatus();
  return DoMemset(offset, value, size);
}

absl::StatusOr<size_t> Buffer::OffsetOf(const Tensor& t) {
  if (!IsValidType(static_cast<int32_t>(t.type))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("[Buffer::OffsetOf] tensor \"%s\" has invalid type %d",
                        t.name, static_cast<int32_t>(t.type)));
  }
  if (t.buffer != this) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[Buffer::OffsetOf] tensor %s is not in this buffer", Describe(t)));
  }
  if (t.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[Buffer::OffsetOf] tensor %s has no data", Describe(t)));
  }
  const std::optional<size_t> bytes = CheckedNumBytes(t);
  if (!bytes.has_value()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[Buffer::OffsetOf] the size of tensor %s overflows", Describe(t)));
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(base());
  const uintptr_t data = reinterpret_cast<uintptr_t>(t.data);
  if (data < begin || !RangeInside(data - begin, *bytes, size_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[Buffer::OffsetOf] tensor %s (%u bytes) does not lie inside its "
        "buffer of %u bytes",
        Describe(t), *bytes, size_));
  }
  return static_cast<size_t>(data - begin);
}

absl::Status Buffer::SetTensor(Tensor& t, const void* data, size_t offset,
                               size_t size) {
  absl::StatusOr<size_t> base_offset = OffsetOf(t);
  if (!base_offset.ok()) return base_offset.status();
  if (absl::Status s = CheckRange("Buffer::SetTensor", offset, size,
                                  t.NumBytes(), Describe(t));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPointer("Buffer::SetTensor", data, size); !s.ok()) {
    return s;
  }
  if (size == 0) return absl::OkStatus();
  return DoSetTensor(t, *base_offset, data, offset, size);
}

absl::Status Buffer::GetTensor(const Tensor& t, void* data, size_t offset,
                               size_t size) {
  absl::StatusOr<size_t> base_offset = OffsetOf(t);
  if (!base_offset.ok()) return base_offset.status();
  if (absl::Status s = CheckRange("Buffer::GetTensor", offset, size,
                                  t.NumBytes(), Describe(t));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPointer("Buffer::GetTensor", data, size); !s.ok()) {
    return s;
  }
  if (size == 0) return absl::OkStatus();
  return DoGetTensor(t, *base_offset, data, offset, size);
}

absl::Status Buffer::MemsetTensor(Tensor& t, uint8_t value, size_t offset,
                                  size_t size) {
  absl::StatusOr<size_t> base_offset = OffsetOf(t);
  if (!base_offset.ok()) return base_offset.status();
  if (absl::Status s = CheckRange("Buffer::MemsetTensor", offset, size,
                                  t.NumBytes(), Describe(t));
      !s.ok()) {
    return s;
  }
  if (size == 0) return absl::OkStatus();
  return DoMemsetTensor(t, *base_offset, value, offset, size);
}

absl::Status Buffer::DoSetTensor(Tensor& t, size_t base_offset,
                                 const void* data, size_t offset, size_t size) {
  return DoWrite(base_offset + offset, data, size);
}

absl::Status Buffer::DoGetTensor(const Tensor& t, size_t base_offset,
                                 void* data, size_t offset, size_t size) {
  return DoRead(base_offset + offset, data, size);
}

absl::Status Buffer::DoMemsetTensor(Tensor& t, size_t base_offset,
                                    uint8_t value, size_t offset, size_t size) {
  return DoMemset(base_offset + offset, value, size);
}

absl::StatusOr<bool> Buffer::CopyFrom(const Tensor& src, Tensor& dst) {
  absl::StatusOr<size_t> dst_offset = OffsetOf(dst);
  if (!dst_offset.ok()) return dst_offset.status();
  if (src.buffer == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[Buffer::CopyFrom] source %s has no buffer", Describe(src)));
  }
  absl::StatusOr<size_t> src_offset = src.buffer->OffsetOf(src);
  if (!src_offset.ok()) return src_offset.status();
  const size_t bytes = dst.NumBytes();
  if (src.NumBytes() != bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[Buffer::CopyFrom] source %s has %u bytes, destination %s has %u",
        Describe(src), src.NumBytes(), Describe(dst), bytes));
  }
  // Every buffer writes from host memory, so a host source is always
  // reachable; anything else needs a device-specific override.
  if (!src.buffer->type().is_host()) return false;
  if (absl::Status s = Write(*dst_offset, src.data, bytes); !s.ok()) return s;
  return true;
}

}  // namespace tessera
