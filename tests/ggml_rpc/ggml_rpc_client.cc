#include "tests/ggml_rpc/ggml_rpc_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera::testing {

void Put(std::vector<uint8_t>& out, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back((v >> (8 * i)) & 0xff);
}

void Put(std::vector<uint8_t>& out, const std::vector<uint8_t>& bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

GgmlTensor Contiguous(uint64_t id, uint32_t type, size_t elem,
                      std::vector<uint32_t> ne, uint64_t buffer,
                      uint64_t data) {
  GgmlTensor t;
  t.id = id;
  t.type = type;
  for (size_t i = 0; i < ne.size(); ++i) t.ne[i] = ne[i];
  t.nb[0] = elem;
  for (int i = 1; i < 4; ++i) t.nb[i] = t.nb[i - 1] * t.ne[i - 1];
  t.buffer = buffer;
  t.data = data;
  return t;
}

// Offsets: id 0, type 8, buffer 12, ne 20, nb 36, op 52, op_params 56,
// flags 120, src 124, view_src 204, view_offs 212, data 220, name 228,
// use_count 292.
std::vector<uint8_t> Encode(const GgmlTensor& t) {
  std::vector<uint8_t> out;
  out.reserve(kGgmlTensorBytes);
  Put(out, t.id, 8);
  Put(out, t.type, 4);
  Put(out, t.buffer, 8);
  for (uint32_t n : t.ne) Put(out, n, 4);
  for (uint32_t n : t.nb) Put(out, n, 4);
  Put(out, t.op, 4);
  for (int32_t p : t.op_params) Put(out, static_cast<uint32_t>(p), 4);
  Put(out, static_cast<uint32_t>(t.flags), 4);
  for (uint64_t s : t.src) Put(out, s, 8);
  Put(out, t.view_src, 8);
  Put(out, t.view_offs, 8);
  Put(out, t.data, 8);
  char name[64] = {};
  std::memcpy(name, t.name.data(), std::min<size_t>(t.name.size(), 63));
  out.insert(out.end(), name, name + 64);
  Put(out, 0, 4);
  return out;
}

std::vector<uint8_t> GraphPayload(uint32_t device,
                                  const std::vector<uint64_t>& nodes,
                                  const std::vector<GgmlTensor>& tensors) {
  std::vector<uint8_t> out;
  Put(out, device, 4);
  Put(out, nodes.size(), 4);
  for (uint64_t id : nodes) Put(out, id, 8);
  Put(out, tensors.size(), 4);
  for (const GgmlTensor& t : tensors) Put(out, Encode(t));
  return out;
}

absl::StatusOr<std::unique_ptr<GgmlRpcClient>> GgmlRpcClient::ConnectRaw(
    int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to port ", port, ": ", strerror(errno)));
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return std::unique_ptr<GgmlRpcClient>(new GgmlRpcClient(fd));
}

absl::StatusOr<std::unique_ptr<GgmlRpcClient>> GgmlRpcClient::Connect(
    int port) {
  absl::StatusOr<std::unique_ptr<GgmlRpcClient>> c = ConnectRaw(port);
  if (!c.ok()) return c;
  // HELLO: 24 bytes of transport capabilities (none); answer: major,
  // minor, patch, padding, 24 bytes of capabilities.
  absl::StatusOr<std::vector<uint8_t>> hello =
      (*c)->Call(kHello, std::vector<uint8_t>(24, 0), 28);
  if (!hello.ok()) return hello.status();
  std::memcpy((*c)->version_, hello->data(), 3);
  return c;
}

GgmlRpcClient::~GgmlRpcClient() { close(fd_); }

absl::Status GgmlRpcClient::SendRaw(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = send(fd_, p, size, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("send: ", strerror(errno)));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status GgmlRpcClient::Send(uint8_t command,
                                 const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> frame = {command};
  Put(frame, payload.size(), 8);
  Put(frame, payload);
  return SendRaw(frame.data(), frame.size());
}

absl::Status GgmlRpcClient::ReadAll(void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = recv(fd_, p, size, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return absl::UnavailableError("the server closed the connection");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> GgmlRpcClient::Receive(size_t want_size) {
  uint64_t size = 0;
  if (absl::Status s = ReadAll(&size, sizeof(size)); !s.ok()) return s;
  if (want_size != SIZE_MAX && size != want_size) {
    return absl::InternalError(
        absl::StrCat("response of ", size, " bytes, want ", want_size));
  }
  std::vector<uint8_t> out(size);
  if (absl::Status s = ReadAll(out.data(), size); !s.ok()) return s;
  return out;
}

absl::Status GgmlRpcClient::ReceiveInto(void* data, size_t size) {
  uint64_t got = 0;
  if (absl::Status s = ReadAll(&got, sizeof(got)); !s.ok()) return s;
  if (got != size) {
    return absl::InternalError(
        absl::StrCat("response of ", got, " bytes, want ", size));
  }
  return ReadAll(data, size);
}

absl::StatusOr<std::vector<uint8_t>> GgmlRpcClient::Call(
    uint8_t command, const std::vector<uint8_t>& payload, size_t want_size) {
  if (absl::Status s = Send(command, payload); !s.ok()) return s;
  return Receive(want_size);
}

bool GgmlRpcClient::ClosedByServer(int ms) {
  pollfd p = {fd_, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return false;
  char byte;
  return recv(fd_, &byte, 1, MSG_PEEK) <= 0;
}

absl::StatusOr<uint32_t> GgmlRpcClient::DeviceCount() {
  absl::StatusOr<std::vector<uint8_t>> r = Call(kDeviceCount, {}, 4);
  if (!r.ok()) return r.status();
  uint32_t n;
  std::memcpy(&n, r->data(), 4);
  return n;
}

absl::StatusOr<GgmlRpcClient::Allocation> GgmlRpcClient::Alloc(
    uint32_t device, uint64_t size) {
  std::vector<uint8_t> req;
  Put(req, device, 4);
  Put(req, size, 8);
  absl::StatusOr<std::vector<uint8_t>> r = Call(kAllocBuffer, req, 16);
  if (!r.ok()) return r.status();
  Allocation a;
  std::memcpy(&a.remote_ptr, r->data(), 8);
  std::memcpy(&a.size, r->data() + 8, 8);
  if (a.remote_ptr == 0) return a;
  req.clear();
  Put(req, a.remote_ptr, 8);
  r = Call(kBufferGetBase, req, 8);
  if (!r.ok()) return r.status();
  std::memcpy(&a.base, r->data(), 8);
  return a;
}

absl::Status GgmlRpcClient::SetTensor(const GgmlTensor& t, uint64_t offset,
                                      const void* data, size_t size) {
  std::vector<uint8_t> head = {kSetTensor};
  Put(head, kGgmlTensorBytes + 8 + size, 8);
  Put(head, Encode(t));
  Put(head, offset, 8);
  if (absl::Status s = SendRaw(head.data(), head.size()); !s.ok()) return s;
  return SendRaw(data, size);
}

absl::StatusOr<std::vector<uint8_t>> GgmlRpcClient::GetTensor(
    const GgmlTensor& t, uint64_t offset, uint64_t size) {
  std::vector<uint8_t> req = Encode(t);
  Put(req, offset, 8);
  Put(req, size, 8);
  return Call(kGetTensor, req, size);
}

}  // namespace tessera::testing
