// Fuzzes what a WriteTensor stream parses from each message: the fast path
// that finds a plain chunk in gRPC's slices (proto/chunk_wire.h) and the
// header whose range the server resolves in the session
// (server/decoding/buffer_range.h).
//
// The first input byte picks how the message is cut into slices (as gRPC
// may receive it); the rest is the message. Checked, beyond "no crash":
//  - a chunk the fast path finds is the chunk protobuf's parser finds, byte
//    for byte, and its spans tile it exactly;
//  - a header's range that resolves lies inside the session's buffer.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/chunk_wire.h"
#include "proto/tessera.pb.h"
#include "server/decoding/buffer_range.h"
#include "server/sessions/memory_account.h"
#include "server/sessions/session.h"
#include "tests/fuzz/quiet.h"

namespace {

constexpr size_t kBufferBytes = 4096;

void Check(bool condition) {
  if (!condition) std::abort();
}

grpc::ByteBuffer Sliced(const uint8_t* data, size_t size, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < size; at += piece) {
    slices.emplace_back(data + at, std::min(piece, size - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

void CheckChunk(const grpc::ByteBuffer& message, const uint8_t* data,
                size_t size) {
  auto found = tessera::wire::FindChunk(
      message, tessera::wire::kWriteTensorChunkField);
  if (!found.ok() || !found->has_value()) return;
  const tessera::wire::Chunk& chunk = **found;
  std::string gathered(chunk.size(), '\0');
  size_t next = 0;
  Check(chunk
            .ForEachSpan([&](size_t offset, const uint8_t* p, size_t n) {
              Check(offset == next && offset + n <= gathered.size());
              std::copy(p, p + n, gathered.begin() + offset);
              next = offset + n;
              return absl::OkStatus();
            })
            .ok());
  Check(next == chunk.size());
  tessera::v1::WriteTensorRequest parsed;
  Check(parsed.ParseFromArray(data, static_cast<int>(size)));
  Check(parsed.kind_case() == tessera::v1::WriteTensorRequest::kChunk);
  Check(parsed.chunk() == gathered);
}

struct World {
  World()
      : session("fuzz", "fuzz", next_handle,
                tessera::server::MemoryAccount::Create("the session", 0)) {
    tessera::fuzz::Quiet();
    tessera::CpuDeviceOptions options;
    cpu = std::make_unique<tessera::CpuDevice>(options);
    handle =
        session.AddBuffer(cpu->buffer_type().Alloc(kBufferBytes).value(), {})
            .value();
  }
  std::unique_ptr<tessera::CpuDevice> cpu;
  std::atomic<uint64_t> next_handle{1};
  tessera::server::Session session;
  uint64_t handle = 0;
};

void CheckHeader(World& world, const uint8_t* data, size_t size) {
  tessera::v1::WriteTensorRequest parsed;
  if (!parsed.ParseFromArray(data, static_cast<int>(size)) ||
      !parsed.has_header()) {
    return;
  }
  const auto& header = parsed.header();
  auto range = tessera::server::ResolveRange(
      world.session, "dst", header.dst().buffer(), header.dst().offset(),
      header.size());
  if (!range.ok()) return;
  Check(range->handle == world.handle);
  Check(range->offset <= kBufferBytes &&
        range->size <= kBufferBytes - range->offset);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World();
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  ++data;
  --size;
  CheckChunk(Sliced(data, size, piece), data, size);
  CheckHeader(*world, data, size);
  return 0;
}
