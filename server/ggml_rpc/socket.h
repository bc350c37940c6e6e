#ifndef TESSERA_SERVER_GGML_RPC_SOCKET_H_
#define TESSERA_SERVER_GGML_RPC_SOCKET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::server::ggml_rpc {

// A connected TCP socket (owned; closed on destruction) with whole-message
// reads and writes. Small reads are served from a read-ahead buffer (a
// request's command, size and fixed fields take one system call, not one
// each); large ones go straight into the caller's memory. Reads and writes
// block (a read polls briefly first); Shutdown from another thread ends
// them with an error.
// Thread-compatible, except Shutdown.
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
  // Reads at least `min` and at most `max` bytes into `data`.
  absl::Status Receive(char* data, size_t min, size_t max, size_t wanted);

  const int fd_;
  // Read-ahead: bytes [ahead_begin_, ahead_end_) of ahead_ are unread.
  std::vector<char> ahead_ = std::vector<char>(size_t{64} << 10);
  size_t ahead_begin_ = 0;
  size_t ahead_end_ = 0;
};

// Listens on `host_port` ("127.0.0.1:0" picks a port). Returns the listening
// descriptor and sets `port`. Errors: INVALID_ARGUMENT for an address that
// does not parse; UNAVAILABLE when it cannot be bound.
absl::StatusOr<int> ListenTcp(const std::string& host_port, int& port);

}  // namespace tessera::server::ggml_rpc

#endif  // TESSERA_SERVER_GGML_RPC_SOCKET_H_
