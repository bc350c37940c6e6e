#ifndef TESSERA_SERVER_SESSIONS_COMPUTE_H_
#define TESSERA_SERVER_SESSIONS_COMPUTE_H_

#include <vector>

#include "absl/status/status.h"
#include "backend/device.h"
#include "proto/tessera.pb.h"
#include "server/operations/config.h"
#include "server/sessions/session.h"

namespace tessera::server {

// One-shot Compute of `request` for `session` over `devices` (CPU last):
//  1. Decode and validate the graph; check inputs (every input given) and
//     outputs (flagged kFlagOutput so their memory is kept).
//  2. Under the session's compute mutex, build a Scheduler over the
//     session's streams of `devices` and allocate the graph (the compute
//     memory lives as long as this call).
//  3. Write the inputs, compute, read the outputs into `response`.
// A failed compute leaves the session's streams with a sticky error, so
// they are dropped and made again by the next compute.
// Errors: as DecodeGraph, CheckInputs and CheckOutputs; the scheduler's
// (RESOURCE_EXHAUSTED when compute memory runs out, INVALID_ARGUMENT for a
// node no device supports); a kernel's error.
absl::Status RunCompute(Session& session, const std::vector<Device*>& devices,
                        const Limits& limits,
                        const v1::ComputeRequest& request,
                        v1::ComputeResponse& response);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_COMPUTE_H_
