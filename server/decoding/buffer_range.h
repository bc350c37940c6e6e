#ifndef TESSERA_SERVER_DECODING_BUFFER_RANGE_H_
#define TESSERA_SERVER_DECODING_BUFFER_RANGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "server/sessions/session.h"

namespace tessera::server {

// A checked byte range [offset, offset + size) of one session buffer. The
// shared_ptr keeps the buffer alive while a request uses it, even if the
// session frees or closes meanwhile.
struct BufferRange {
  std::shared_ptr<Buffer> buffer;
  uint64_t handle = 0;
  size_t offset = 0;
  size_t size = 0;
};

// Resolves `handle` in `session` and checks that [offset, offset + size)
// lies inside the buffer (without overflow). `what` names the field in
// errors, e.g. "dst". Errors: NOT_FOUND for a handle the session does not
// hold; INVALID_ARGUMENT for a range outside the buffer.
absl::StatusOr<BufferRange> ResolveRange(const Session& session,
                                         absl::string_view what,
                                         uint64_t handle, uint64_t offset,
                                         uint64_t size);

// Copies `size` bytes between two ranges of the same size, on any devices:
// directly when the destination buffer can read the source's memory,
// otherwise through host memory in pieces of at most `staging_bytes`. A
// copy within one buffer behaves like memmove.
absl::Status CopyRange(const BufferRange& src, const BufferRange& dst,
                       size_t staging_bytes);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_DECODING_BUFFER_RANGE_H_
