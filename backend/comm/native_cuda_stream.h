#ifndef TESSERA_BACKEND_COMM_NATIVE_CUDA_STREAM_H_
#define TESSERA_BACKEND_COMM_NATIVE_CUDA_STREAM_H_

#include "absl/status/status.h"

// The CUDA runtime's stream handle type (cudaStream_t is CUstream_st*),
// declared here so that this header needs no CUDA headers.
struct CUstream_st;

namespace tessera {

// What a Stream whose work runs on a CUDA stream exposes to collectives
// (NcclCommunicator): a Stream that also implements this interface lets a
// communicator enqueue NCCL operations on its CUDA stream, in order with
// the Stream's own work. A CUDA device's stream implements it next to
// Stream (found with dynamic_cast). Thread-safety as the Stream's.
class NativeCudaStream {
 public:
  virtual ~NativeCudaStream() = default;

  // The CUDA stream on which the Stream's work runs: work enqueued on it
  // now runs after everything queued on the Stream so far, and before
  // everything queued on the Stream later.
  virtual CUstream_st* cuda_stream() = 0;
  // The CUDA device ordinal of that stream.
  virtual int cuda_ordinal() const = 0;
  // The Stream's sticky status now (OK unless earlier work failed).
  virtual absl::Status status() = 0;
  // Makes `status` (an error) the Stream's sticky status unless it already
  // has one, as if queued work had failed with it.
  virtual void Fail(absl::Status status) = 0;
};

}  // namespace tessera

#endif  // TESSERA_BACKEND_COMM_NATIVE_CUDA_STREAM_H_
