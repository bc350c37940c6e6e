#ifndef TESSERA_SERVER_RPC_EXECUTE_REACTOR_H_
#define TESSERA_SERVER_RPC_EXECUTE_REACTOR_H_

#include <atomic>
#include <cstddef>

#include "grpcpp/support/server_callback.h"
#include "proto/tessera.grpc.pb.h"
#include "server/operations/config.h"
#include "server/rpc/in_flight.h"
#include "server/rpc/work_queue.h"
#include "server/sessions/session_manager.h"

namespace tessera::server {

// What every Execute stream shares; all of it outlives the streams.
struct ExecuteContext {
  SessionManager& sessions;
  const Limits& limits;
  InFlight& in_flight;
  // Runs the part of a stream's work that waits (submissions and waits for
  // executions); a stream has no thread of its own.
  WorkQueue& work;
  // The Execute streams open now (limits.max_execute_streams at most).
  std::atomic<size_t>& open_streams;
};

// Execute: a bidirectional stream of executions of registered graphs.
//  - Reading: a message carries one execution or, in `more`, up to 63
//    after it (whose own `more` is empty); any other message ends the
//    stream with INVALID_ARGUMENT. Each execution read is held until its
//    response is written. While limits.max_queued_executions are held the
//    reactor stops reading (a message is taken whole, so up to 63 more may
//    be held), and a client that does not read its responses stops being
//    read.
//  - Driving: one task at a time per stream submits the requests in order
//    and completes them in order. For a graph over several devices Submit
//    queues compute and output reads without waiting, so several
//    executions are in flight and the scheduler pipelines them; for one on
//    one device Submit runs the work (RegisteredGraph::Runner::kCaller), and
//    each is completed before the next is submitted. The driver starts on
//    gRPC's callback thread when the stream is idle (a short execution is
//    answered without a hand-off), completes there an execution that is
//    already done, and moves to `work` rather than wait there for an
//    execution, submit behind one of its own still running, or submit one
//    whose work runs in Submit unless its latest execution took at most the
//    time the callback thread would wait (and no other runs now). Its first
//    submission may still wait for another stream's execution of the same
//    graph to free a copy slot.
//  - Writing: one message at a time, in order; responses ready together go
//    in one message, up to the client's max_responses_per_message (at most
//    64) and 4 MiB in all. On the callback thread a response waits (up to a
//    message's worth) for the executions queued behind it. Output bytes
//    count against the session's quota (Session::Reserve) until written; an
//    execution whose outputs the quota cannot hold gets RESOURCE_EXHAUSTED.
// An execution's error goes into its own response (status_code, message)
// and the stream stays open; an execution that failed only because an
// earlier one left the graph's streams failed is submitted again, in its
// turn. The stream finishes OK after the client half-closes and every
// response is written. On cancellation the requests not yet submitted are
// dropped and those in flight are waited for before the reactor goes away.
// While a request read has no response written, the stream counts in
// `in_flight`. Counts in `open_streams` until done; deletes itself.
grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>*
NewExecuteReactor(const ExecuteContext& context);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_EXECUTE_REACTOR_H_
