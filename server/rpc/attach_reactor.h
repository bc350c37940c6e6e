#ifndef TESSERA_SERVER_RPC_ATTACH_REACTOR_H_
#define TESSERA_SERVER_RPC_ATTACH_REACTOR_H_

#include "grpcpp/support/server_callback.h"
#include "proto/tessera.grpc.pb.h"
#include "server/rpc/drain_notice.h"
#include "server/sessions/session_manager.h"

namespace tessera::server {

// Attach: holds a session open for as long as the stream lives. When the
// client cancels the call, crashes or loses its connection, the session is
// closed at once (SessionManager::Detach); when the session closes another
// way (CloseSession), the stream finishes OK. When the daemon starts to
// drain (`drain`), the stream receives one DRAINING event. NOT_FOUND for an
// unknown session, FAILED_PRECONDITION for a second Attach. Deletes itself
// when done.
grpc::ServerWriteReactor<v1::AttachEvent>* NewAttachReactor(
    SessionManager& sessions, DrainNotice& drain,
    const v1::AttachRequest* request);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_ATTACH_REACTOR_H_
