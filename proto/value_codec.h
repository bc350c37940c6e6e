#ifndef TESSERA_PROTO_VALUE_CODEC_H_
#define TESSERA_PROTO_VALUE_CODEC_H_

// Small values on the wire: a buffer's usage (AllocBuffer), a content hash
// (WriteTensor, WriteTensorByHash) and an execution's status (Execute).

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "proto/content_hash.h"
#include "proto/tessera.pb.h"

namespace tessera::wire {

v1::BufferUsage ToProto(BufferUsage usage);
// Errors: INVALID_ARGUMENT "usage: unknown value N".
absl::StatusOr<BufferUsage> FromProto(v1::BufferUsage usage);

v1::ContentHash ToProto(const ContentHash& hash);
// Every message is a hash (an absent one reads as zeros).
ContentHash FromProto(const v1::ContentHash& hash);

// Writes `status` into the response's status_code and status_message.
void SetStatus(const absl::Status& status, v1::ExecuteResponse& response);
// The execution's status as the response carries it.
absl::Status GetStatus(const v1::ExecuteResponse& response);

}  // namespace tessera::wire

#endif  // TESSERA_PROTO_VALUE_CODEC_H_
