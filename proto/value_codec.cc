#include "proto/value_codec.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace tessera::wire {

v1::BufferUsage ToProto(BufferUsage usage) {
  switch (usage) {
    case BufferUsage::kAny:
      return v1::BUFFER_USAGE_ANY;
    case BufferUsage::kWeights:
      return v1::BUFFER_USAGE_WEIGHTS;
    case BufferUsage::kCompute:
      return v1::BUFFER_USAGE_COMPUTE;
  }
  return v1::BUFFER_USAGE_ANY;
}

absl::StatusOr<BufferUsage> FromProto(v1::BufferUsage usage) {
  switch (usage) {
    case v1::BUFFER_USAGE_ANY:
      return BufferUsage::kAny;
    case v1::BUFFER_USAGE_WEIGHTS:
      return BufferUsage::kWeights;
    case v1::BUFFER_USAGE_COMPUTE:
      return BufferUsage::kCompute;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("usage: unknown value ", static_cast<int>(usage)));
  }
}

v1::ContentHash ToProto(const ContentHash& hash) {
  v1::ContentHash out;
  out.set_high(hash.high);
  out.set_low(hash.low);
  return out;
}

ContentHash FromProto(const v1::ContentHash& hash) {
  return {.high = hash.high(), .low = hash.low()};
}

void SetStatus(const absl::Status& status, v1::ExecuteResponse& response) {
  response.set_status_code(static_cast<int32_t>(status.code()));
  response.set_status_message(std::string(status.message()));
}

absl::Status GetStatus(const v1::ExecuteResponse& response) {
  if (response.status_code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(response.status_code()),
                      response.status_message());
}

}  // namespace tessera::wire
