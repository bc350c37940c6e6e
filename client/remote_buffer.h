#ifndef TESSERA_CLIENT_REMOTE_BUFFER_H_
#define TESSERA_CLIENT_REMOTE_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/buffer.h"
#include "backend/meta/split_state.h"
#include "client/client.h"
#include "proto/device_codec.h"
#include "proto/tessera.pb.h"

namespace tessera::client {

class RemoteDevice;

// Memory of one device of a daemon, allocated in the client's session.
// Buffers get synthetic base addresses that never overlap within the
// process, so tensors placed by local allocators map back to
// (buffer handle, offset) when a graph is sent; nothing dereferences them.
// The daemon holds them with usage WEIGHTS: data a client placed on a device
// decides where the daemon runs the ops that read it.
class RemoteBufferType final : public BufferType {
 public:
  // The device's own memory: the first of `info`'s buffer types (without
  // any, the device's name, alignment 64 and no size limit).
  RemoteBufferType(RemoteDevice& device, Client& client,
                   const wire::DeviceDescription& info);

  std::string_view name() const override { return name_; }
  Device& device() override;
  // Errors: the daemon's AllocBuffer status (RESOURCE_EXHAUSTED when the
  // device or the session's quota cannot hold `size`).
  absl::StatusOr<std::unique_ptr<Buffer>> Alloc(size_t size) override;
  // On a meta device with a split policy (RemoteDevice::SetSplitPolicy):
  // the daemon packs the placed weights, each member holding only its
  // slices (AllocBufferRequest.placed); such a buffer is written by whole
  // tensors only. Otherwise Alloc(size).
  absl::StatusOr<std::unique_ptr<Buffer>> AllocPlaced(
      size_t size, absl::Span<const TensorPlacement> placements) override;
  size_t alignment() const override { return alignment_; }
  size_t max_size() const override { return max_size_; }
  bool is_host() const override { return false; }

 private:
  RemoteDevice& device_;
  Client& client_;
  const std::string device_name_;
  const std::string name_;
  const size_t alignment_;
  const size_t max_size_;
};

class RemoteBuffer final : public Buffer {
 public:
  RemoteBuffer(RemoteBufferType& type, Client& client,
               const RemoteBufferInfo& info);
  // Frees the daemon's buffer (errors are logged).
  ~RemoteBuffer() override;

  void* base() override { return reinterpret_cast<void*>(base_); }
  // Copies between two buffers of the same session on the daemon; false for
  // other sources (the caller stages through host memory).
  absl::StatusOr<bool> CopyFrom(const Tensor& src, Tensor& dst) override;

  Client& client() const { return client_; }
  uint64_t handle() const { return handle_; }
  // (handle, offset) of `t`, which must lie in this buffer.
  absl::StatusOr<v1::TensorRef> RefOf(const Tensor& t);
  // Whether `t` is split or partial over the members of the daemon's meta
  // device: it is then written and read whole with its layout (SetTensor,
  // GetTensor), never by byte ranges or through the content cache.
  // Errors: as the device's split policy.
  absl::StatusOr<bool> IsSplit(const Tensor& t);

 protected:
  absl::Status DoWrite(size_t offset, const void* data, size_t size) override;
  absl::Status DoRead(size_t offset, void* data, size_t size) override;
  absl::Status DoMemset(size_t offset, uint8_t value, size_t size) override;
  // On a meta device with a split policy (RemoteDevice::SetSplitPolicy), a
  // tensor written or read whole travels with its layout and split state
  // (the daemon scatters or gathers it); a part of a split or partial tensor
  // is INVALID_ARGUMENT.
  absl::Status DoSetTensor(Tensor& t, size_t base_offset, const void* data,
                           size_t offset, size_t size) override;
  absl::Status DoGetTensor(const Tensor& t, size_t base_offset, void* data,
                           size_t offset, size_t size) override;

 private:
  // The split state of `t` on the daemon, if it has one other than
  // MIRRORED.
  absl::StatusOr<std::optional<SplitState>> SplitOf(const Tensor& t);

  v1::TensorRef At(size_t offset) const;

  Client& client_;
  const uint64_t handle_;
  const uintptr_t base_;
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_REMOTE_BUFFER_H_
