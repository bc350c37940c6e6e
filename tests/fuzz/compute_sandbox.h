#ifndef TESSERA_TESTS_FUZZ_COMPUTE_SANDBOX_H_
#define TESSERA_TESTS_FUZZ_COMPUTE_SANDBOX_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "backend/cpu/cpu_device.h"
#include "proto/tessera.pb.h"
#include "server/sessions/session.h"

namespace tessera::fuzz {

// What the Compute fuzz targets run requests in: one CPU device of one
// thread and, per input, a new session holding one cleared buffer.
class ComputeSandbox {
 public:
  static constexpr uint64_t kBufferBytes = 4096;
  static constexpr uint32_t kMaxTensors = 64;
  static constexpr int64_t kMaxElements = 4096;

  // Also silences the logs (Quiet).
  ComputeSandbox();

  // A new session holding one cleared buffer of kBufferBytes, whose handle
  // goes to `buffer`.
  std::unique_ptr<server::Session> NewSession(uint64_t& buffer);

  // Runs `request` as the daemon's one-shot Compute in `session`, then
  // closes the session. A graph of more than kMaxTensors tensors, or with a
  // tensor of more than kMaxElements, is skipped so that each input runs in
  // microseconds (decoding limits are the decoder tests' business).
  void Compute(server::Session& session, const v1::ComputeRequest& request);

 private:
  std::unique_ptr<CpuDevice> cpu_;
  std::atomic<uint64_t> next_handle_{1};
};

}  // namespace tessera::fuzz

#endif  // TESSERA_TESTS_FUZZ_COMPUTE_SANDBOX_H_
