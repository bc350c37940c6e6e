#ifndef TESSERA_TESTS_GGML_RPC_GGML_RPC_CLIENT_H_
#define TESSERA_TESTS_GGML_RPC_GGML_RPC_CLIENT_H_

// A ggml-rpc 5.1.0 client written from the protocol's definition (ggml's
// src/ggml-rpc/ggml-rpc.cpp at d99724f), independent of the daemon's own
// protocol code: every message is laid out byte by byte here. For tests
// and benchmarks.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::testing {

// ggml's command numbers.
enum GgmlCommand : uint8_t {
  kAllocBuffer = 0,
  kGetAlignment,
  kGetMaxSize,
  kBufferGetBase,
  kFreeBuffer,
  kBufferClear,
  kSetTensor,
  kSetTensorHash,
  kGetTensor,
  kCopyTensor,
  kGraphCompute,
  kGetDeviceMemory,
  kInitTensor,
  kGetAllocSize,
  kHello,
  kDeviceCount,
  kGraphRecompute,
  kMemsetTensor,
};

// ggml's rpc_tensor, field by field.
struct GgmlTensor {
  uint64_t id = 0;
  uint32_t type = 0;  // ggml_type: 0 F32, 1 F16, 26 I32, 27 I64
  uint64_t buffer = 0;
  uint32_t ne[4] = {1, 1, 1, 1};
  uint32_t nb[4] = {0, 0, 0, 0};
  uint32_t op = 0;  // ggml_op
  int32_t op_params[16] = {};
  int32_t flags = 0;
  uint64_t src[10] = {};
  uint64_t view_src = 0;
  uint64_t view_offs = 0;
  uint64_t data = 0;
  std::string name;
};
inline constexpr size_t kGgmlTensorBytes = 296;

// A contiguous tensor of `elem` bytes per value with shape `ne`.
GgmlTensor Contiguous(uint64_t id, uint32_t type, size_t elem,
                      std::vector<uint32_t> ne, uint64_t buffer,
                      uint64_t data);

// The 296 bytes of `t` (rpc_tensor, packed, little-endian).
std::vector<uint8_t> Encode(const GgmlTensor& t);
// Appends little-endian integers.
void Put(std::vector<uint8_t>& out, uint64_t v, size_t bytes);
void Put(std::vector<uint8_t>& out, const std::vector<uint8_t>& bytes);

// GRAPH_COMPUTE's payload.
std::vector<uint8_t> GraphPayload(uint32_t device,
                                  const std::vector<uint64_t>& nodes,
                                  const std::vector<GgmlTensor>& tensors);

class GgmlRpcClient {
 public:
  // Connects to 127.0.0.1:`port` (TCP_NODELAY) and says HELLO.
  // Errors: UNAVAILABLE; INTERNAL for a bad HELLO reply.
  static absl::StatusOr<std::unique_ptr<GgmlRpcClient>> Connect(int port);
  // Connects without HELLO.
  static absl::StatusOr<std::unique_ptr<GgmlRpcClient>> ConnectRaw(int port);
  ~GgmlRpcClient();

  // The version HELLO answered.
  uint8_t major() const { return version_[0]; }
  uint8_t minor() const { return version_[1]; }
  uint8_t patch() const { return version_[2]; }

  // Sends | command | size | payload |.
  absl::Status Send(uint8_t command, const std::vector<uint8_t>& payload);
  // Sends raw bytes.
  absl::Status SendRaw(const void* data, size_t size);
  // Reads a response frame; INTERNAL when its size is not `want_size`
  // (any size when want_size is SIZE_MAX); UNAVAILABLE when the server
  // closed the connection.
  absl::StatusOr<std::vector<uint8_t>> Receive(size_t want_size);
  // Send, then Receive.
  absl::StatusOr<std::vector<uint8_t>> Call(uint8_t command,
                                            const std::vector<uint8_t>& payload,
                                            size_t want_size);
  // Reads a response of `size` bytes into `data` (no copy).
  absl::Status ReceiveInto(void* data, size_t size);
  // Whether the server has closed the connection (waits up to `ms`).
  bool ClosedByServer(int ms = 5000);

  // Typed calls.
  absl::StatusOr<uint32_t> DeviceCount();
  struct Allocation {
    uint64_t remote_ptr = 0;
    uint64_t size = 0;
    uint64_t base = 0;
  };
  // ALLOC_BUFFER then BUFFER_GET_BASE (when the pointer is not null).
  absl::StatusOr<Allocation> Alloc(uint32_t device, uint64_t size);
  absl::Status SetTensor(const GgmlTensor& t, uint64_t offset,
                         const void* data, size_t size);
  absl::StatusOr<std::vector<uint8_t>> GetTensor(const GgmlTensor& t,
                                                 uint64_t offset,
                                                 uint64_t size);

 private:
  explicit GgmlRpcClient(int fd) : fd_(fd) {}
  absl::Status ReadAll(void* data, size_t size);

  const int fd_;
  uint8_t version_[3] = {};
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_GGML_RPC_GGML_RPC_CLIENT_H_
