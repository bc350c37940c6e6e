#ifndef TESSERA_PROTO_GGML_RPC_PROTOCOL_H_
#define TESSERA_PROTO_GGML_RPC_PROTOCOL_H_

// ggml's RPC protocol, version 5.1.0 (the `--rpc` backend of llama.cpp), as
// the ggml-org/ggml repository defines it in src/ggml-rpc/ggml-rpc.cpp at
// commit d99724f. All integers little-endian; structs packed.
//
// A request is | command (1 byte) | size (u64) | size bytes |; a response is
// | size (u64) | size bytes |. SET_TENSOR, GRAPH_COMPUTE and
// GRAPH_RECOMPUTE have no response. The first command of a connection is
// HELLO. A server that cannot serve a request closes the connection: that
// is the protocol's only failure reply (ALLOC_BUFFER answers a null pointer
// when memory runs out, SET_TENSOR_HASH answers 0 for an unknown hash).

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tessera::ggml_rpc {

inline constexpr uint8_t kVersionMajor = 5;
inline constexpr uint8_t kVersionMinor = 1;
inline constexpr uint8_t kVersionPatch = 0;

enum class Command : uint8_t {
  kAllocBuffer = 0,
  kGetAlignment = 1,
  kGetMaxSize = 2,
  kBufferGetBase = 3,
  kFreeBuffer = 4,
  kBufferClear = 5,
  kSetTensor = 6,
  kSetTensorHash = 7,
  kGetTensor = 8,
  kCopyTensor = 9,
  kGraphCompute = 10,
  kGetDeviceMemory = 11,
  kInitTensor = 12,
  kGetAllocSize = 13,
  kHello = 14,
  kDeviceCount = 15,
  kGraphRecompute = 16,
  kMemsetTensor = 17,
};
inline constexpr int kCommandCount = 18;

// The command's name as ggml spells it ("GRAPH_RECOMPUTE"); "unknown
// command" for a byte that is no command.
absl::string_view CommandName(uint8_t command);

inline constexpr int kMaxDims = 4;
inline constexpr int kMaxSrc = 10;
inline constexpr int kMaxOpParams = 16;
inline constexpr int kMaxName = 64;
// Transport capabilities exchanged by HELLO (RDMA); all zero: plain TCP.
inline constexpr int kConnCapsSize = 24;

// The structs below are packed, so their fields may lie at any address.
// Read and write them by value only (a field, an array element): binding a
// reference to one (a `const T&` parameter, a forwarding reference such as
// a log argument, a range-for over an array), passing an array or taking a
// field's address is undefined behaviour where the field is misaligned.
#pragma pack(push, 1)
// A tensor on the wire. `id` is the client's name for it (its address
// there; 0 is "none" in src and view_src); `buffer` the remote pointer of
// the buffer holding it and `data` the address of its bytes, both as the
// server handed them out (0 when it is in no server buffer).
struct WireTensor {
  uint64_t id;
  uint32_t type;
  uint64_t buffer;
  uint32_t ne[kMaxDims];
  uint32_t nb[kMaxDims];
  uint32_t op;
  int32_t op_params[kMaxOpParams];
  int32_t flags;
  uint64_t src[kMaxSrc];
  uint64_t view_src;
  uint64_t view_offs;
  uint64_t data;
  char name[kMaxName];
  int32_t use_count;
};
static_assert(sizeof(WireTensor) == 296);

struct HelloRequest {
  uint8_t conn_caps[kConnCapsSize];
};
struct HelloResponse {
  uint8_t major, minor, patch, padding;
  uint8_t conn_caps[kConnCapsSize];
};
struct DeviceCountResponse {
  uint32_t device_count;
};
struct DeviceRequest {  // GET_ALIGNMENT, GET_MAX_SIZE, GET_DEVICE_MEMORY,
  uint32_t device;      // GRAPH_RECOMPUTE
};
struct U64Response {  // GET_ALIGNMENT, GET_MAX_SIZE, GET_ALLOC_SIZE
  uint64_t value;
};
struct AllocBufferRequest {
  uint32_t device;
  uint64_t size;
};
struct AllocBufferResponse {
  uint64_t remote_ptr;
  uint64_t remote_size;
};
struct BufferRequest {  // BUFFER_GET_BASE, FREE_BUFFER
  uint64_t remote_ptr;
};
struct BufferGetBaseResponse {
  uint64_t base_ptr;
};
struct BufferClearRequest {
  uint64_t remote_ptr;
  uint8_t value;
};
struct MemsetTensorRequest {
  WireTensor tensor;
  uint64_t offset;
  uint64_t size;
  uint8_t value;
};
// SET_TENSOR's payload starts with this header; the data follows.
struct SetTensorHeader {
  WireTensor tensor;
  uint64_t offset;
};
struct SetTensorHashRequest {
  WireTensor tensor;
  uint64_t offset;
  uint64_t hash;
};
struct ResultResponse {  // SET_TENSOR_HASH, COPY_TENSOR
  uint8_t result;
};
struct GetTensorRequest {
  WireTensor tensor;
  uint64_t offset;
  uint64_t size;
};
struct CopyTensorRequest {
  WireTensor src;
  WireTensor dst;
};
struct GetDeviceMemoryResponse {
  uint64_t free_mem;
  uint64_t total_mem;
};
struct InitTensorRequest {
  WireTensor tensor;
};
struct GetAllocSizeRequest {
  uint32_t device;
  WireTensor tensor;
  WireTensor srcs[kMaxSrc];
};
#pragma pack(pop)

// GRAPH_COMPUTE's payload: | device (u32) | n_nodes (u32) | node ids
// (n_nodes x u64) | n_tensors (u32) | n_tensors x WireTensor |.
inline constexpr size_t kGraphHeaderBytes = 2 * sizeof(uint32_t);

// SET_TENSOR_HASH names content by the 64-bit FNV-1a hash of its bytes.
uint64_t Fnv1a64(absl::Span<const uint8_t> bytes);
// The hash continued over more bytes (start with kFnvOffsetBasis).
inline constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ULL;
uint64_t Fnv1a64(uint64_t hash, absl::Span<const uint8_t> bytes);

}  // namespace tessera::ggml_rpc

#endif  // TESSERA_PROTO_GGML_RPC_PROTOCOL_H_
