#ifndef TESSERA_SERVER_GGML_RPC_SOCKET_H_
#define TESSERA_SERVER_GGML_RPC_SOCKET_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::server::ggml_rpc {

// A connected TCP socket (owned; closed on destruction) with whole-message
// reads and writes. Reads and writes block; Shutdown from another thread
// ends them with an error. Thread-compatible, except Shutdown.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket();
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Reads exactly `size` bytes. Errors: UNAVAILABLE when the peer closed
  // or the socket was shut down (naming how many bytes were missing).
  absl::Status Read(void* data, size_t size);
  // Writes all `size` bytes. Errors: UNAVAILABLE as Read.
  absl::Status Write(const void* data, size_t size);
  // Writes a response frame: its u64 size, then `size` bytes of `data`
  // (`size` 0: the size alone).
  absl::Status WriteFrame(const void* data, size_t size);
  // Ends blocked and later reads and writes (both directions). Thread-safe.
  void Shutdown();

  // "127.0.0.1:40212" for logs.
  std::string Peer() const;

 private:
  const int fd_;
};

// Listens on `host_port` ("127.0.0.1:0" picks a port). Returns the listening
// descriptor and sets `port`. Errors: INVALID_ARGUMENT for an address that
// does not parse; UNAVAILABLE when it cannot be bound.
absl::StatusOr<int> ListenTcp(const std::string& host_port, int& port);

}  // namespace tessera::server::ggml_rpc

#endif  // TESSERA_SERVER_GGML_RPC_SOCKET_H_
