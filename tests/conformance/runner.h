#ifndef TESSERA_TESTS_CONFORMANCE_RUNNER_H_
#define TESSERA_TESTS_CONFORMANCE_RUNNER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "backend/device.h"
#include "tests/conformance/cases.h"

namespace tessera::conformance {

// Runs `op_case` on `device` and on the reference kernels with the same
// inputs and compares the outputs.
//
//  1. Builds the case twice, in a Context for the device and one for the
//     reference, and expands each into a Graph.
//  2. Fills every leaf with data that is a deterministic function of `seed`
//     (see OpCase): the same bytes for both graphs.
//  3. Device: leafs go into one buffer of device.buffer_type() (AllocTensors),
//     the nodes are placed by a GraphAllocator; a Stream from
//     device.CreateStream() uploads the leafs, computes the graph and reads
//     the output back.
//  4. Reference: host memory per tensor (views alias their source), then
//     ReferenceCompute(node) for every node in order.
//  5. Compares: exact equality for I32 outputs, else the NMSE
//     sum((d - r)^2) / sum(r^2) (the plain sum of squared errors when
//     sum(r^2) is 0) against op_case.max_nmse.
//
// Returns OK when they agree. Errors:
//  - UNIMPLEMENTED only when device.SupportsOp() rejects one of the graph's
//    (non-view) nodes: the caller skips the case.
//  - INTERNAL naming the case and the device when the outputs disagree (with
//    the NMSE, the bound and the worst element) or the device fails.
//  - INVALID_ARGUMENT when the case itself is broken: it does not build, the
//    two builds differ, or the reference rejects it or produces a non-finite
//    value.
absl::Status RunCase(const OpCase& op_case, Device& device, uint32_t seed);

// The NMSE of `actual` against `expected` (same size) as RunCase computes
// it; infinity when they differ in size or in a non-finite value.
double Nmse(absl::Span<const double> actual, absl::Span<const double> expected);

}  // namespace tessera::conformance

#endif  // TESSERA_TESTS_CONFORMANCE_RUNNER_H_
