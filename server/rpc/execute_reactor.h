#ifndef TESSERA_SERVER_RPC_EXECUTE_REACTOR_H_
#define TESSERA_SERVER_RPC_EXECUTE_REACTOR_H_

#include "grpcpp/support/server_callback.h"
#include "proto/tessera.grpc.pb.h"
#include "server/operations/config.h"
#include "server/rpc/in_flight.h"
#include "server/sessions/session_manager.h"

namespace tessera::server {

// Execute: a bidirectional stream of executions of registered graphs.
//  - Reading: requests queue up (at most limits.max_queued_executions; the
//    reactor stops reading while the queue is full).
//  - A submitter thread takes them in order: finds the session and graph,
//    binds inputs and queues compute and output reads
//    (RegisteredGraph::Submit), without waiting, so several executions are
//    in flight and the scheduler pipelines them.
//  - A completer thread waits for each execution in submission order and
//    queues its response; responses are written one at a time, in order.
// An execution's error goes into its response (status_code, message); the
// stream stays open. The stream finishes OK after the client half-closes
// and every response is written. On cancellation the queued requests are
// dropped and the executions in flight are waited for before the reactor
// goes away. While a request read has no response written, the stream
// counts in `in_flight`. Deletes itself when done.
grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>*
NewExecuteReactor(SessionManager& sessions, const Limits& limits,
                  InFlight& in_flight);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_EXECUTE_REACTOR_H_
