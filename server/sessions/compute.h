#ifndef TESSERA_SERVER_SESSIONS_COMPUTE_H_
#define TESSERA_SERVER_SESSIONS_COMPUTE_H_

#include <vector>

#include "absl/status/status.h"
#include "backend/device.h"
#include "proto/tessera.pb.h"
#include "server/operations/config.h"
#include "server/sessions/session.h"

namespace tessera::server {

// Computations a session asks for: one-shot graphs (Compute) and graphs
// registered for many executions (RegisterGraph).

// One-shot Compute of `request` for `session` over `devices` (CPU last):
//  1. Decode and validate the graph; check inputs (every input given) and
//     outputs (flagged kFlagOutput so their memory is kept).
//  2. Under the session's compute mutex, build a Scheduler over the
//     session's streams of `devices` and allocate the graph (the compute
//     memory lives as long as this call and is charged to the session
//     meanwhile).
//  3. Write the inputs, compute, read the outputs into `response`.
// A failed compute leaves the session's streams with a sticky error, so
// they are dropped and made again by the next compute.
// Errors: as DecodeGraph, CheckInputs and CheckOutputs; RESOURCE_EXHAUSTED
// when the compute memory takes the session past its quota or the daemon
// past its budget; the scheduler's (RESOURCE_EXHAUSTED when compute memory
// runs out, INVALID_ARGUMENT for a
// node no device supports); a kernel's error.
absl::Status RunCompute(Session& session, const std::vector<Device*>& devices,
                        const Limits& limits,
                        const v1::ComputeRequest& request,
                        v1::ComputeResponse& response);

// RegisterGraph of `request` for `session` over `devices` (CPU last):
//  1. Decode and validate the graph ("[RegisterGraph] " before the
//     decoder's message).
//  2. Place and allocate it with n_copies slots (0 means 1; RegisteredGraph
//     checks the range) and report its splits and compute memory in
//     `response`.
//  3. Charge the compute memory to the session (its quota, the daemon's
//     budget) for the graph's life, then hand the graph to the session for
//     its handle.
// Errors: as DecodeGraph and RegisteredGraph::Create; RESOURCE_EXHAUSTED
// over the quota; NOT_FOUND once the session is closed.
absl::Status RunRegisterGraph(Session& session,
                              const std::vector<Device*>& devices,
                              const Limits& limits,
                              const v1::RegisterGraphRequest& request,
                              v1::RegisterGraphResponse& response);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_SESSIONS_COMPUTE_H_
