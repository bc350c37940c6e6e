#ifndef TESSERA_SERVER_RPC_SERVICE_H_
#define TESSERA_SERVER_RPC_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "backend/registry.h"
#include "grpcpp/support/server_callback.h"
#include "proto/tessera.grpc.pb.h"
#include "server/operations/config.h"
#include "server/operations/metrics.h"
#include "server/operations/token_auth.h"
#include "server/rpc/drain_notice.h"
#include "server/rpc/in_flight.h"
#include "server/rpc/tensor_streams.h"
#include "server/rpc/work_queue.h"
#include "server/sessions/content_store.h"
#include "server/sessions/session_manager.h"

namespace tessera::server {

// The tessera.v1.Tessera service (proto/tessera.proto documents every RPC
// and its errors). A thin layer: each RPC finds the session, converts the
// request and calls sessions, buffers, the graph decoder and the executor.
// Quick RPCs finish on gRPC's callback thread; compute and copies run on
// `work`. Thread-safe.
// WriteTensor and ReadTensor take raw messages (server/rpc/tensor_streams.h).
class Service final : public v1::Tessera::WithRawCallbackMethod_WriteTensor<
                          v1::Tessera::WithRawCallbackMethod_ReadTensor<
                              v1::Tessera::CallbackService>> {
 public:
  // The protocol versions this server speaks (tessera.proto).
  static constexpr uint32_t kMinVersion = 1;
  static constexpr uint32_t kMaxVersion = 2;

  // Everything passed in must outlive the service. Every call must pass
  // `auth` (UNAUTHENTICATED otherwise); uploads with a content hash are
  // kept in `store`; offloaded calls and the tensor and Execute streams
  // count in `in_flight`.
  Service(const Registry& registry, SessionManager& sessions, WorkQueue& work,
          InFlight& in_flight, const Limits& limits, const TokenAuth& auth,
          Metrics& metrics, ContentStore& store);

  // Tells every Attach stream, now and later, that the daemon drains.
  void AnnounceDrain() { drain_.Announce(); }

  grpc::ServerUnaryReactor* Hello(grpc::CallbackServerContext* context,
                                  const v1::HelloRequest* request,
                                  v1::HelloResponse* response) override;
  grpc::ServerWriteReactor<v1::AttachEvent>* Attach(
      grpc::CallbackServerContext* context,
      const v1::AttachRequest* request) override;
  grpc::ServerUnaryReactor* CloseSession(
      grpc::CallbackServerContext* context,
      const v1::CloseSessionRequest* request,
      v1::CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* ListDevices(
      grpc::CallbackServerContext* context,
      const v1::ListDevicesRequest* request,
      v1::ListDevicesResponse* response) override;

  grpc::ServerUnaryReactor* AllocBuffer(
      grpc::CallbackServerContext* context,
      const v1::AllocBufferRequest* request,
      v1::AllocBufferResponse* response) override;
  grpc::ServerUnaryReactor* FreeBuffer(
      grpc::CallbackServerContext* context,
      const v1::FreeBufferRequest* request,
      v1::FreeBufferResponse* response) override;
  grpc::ServerUnaryReactor* ClearBuffer(
      grpc::CallbackServerContext* context,
      const v1::ClearBufferRequest* request,
      v1::ClearBufferResponse* response) override;
  grpc::ServerUnaryReactor* GetAllocSize(
      grpc::CallbackServerContext* context,
      const v1::GetAllocSizeRequest* request,
      v1::GetAllocSizeResponse* response) override;

  grpc::ServerReadReactor<grpc::ByteBuffer>* WriteTensor(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* WriteTensorByHash(
      grpc::CallbackServerContext* context,
      const v1::WriteTensorByHashRequest* request,
      v1::WriteTensorByHashResponse* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadTensor(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* MemsetTensor(
      grpc::CallbackServerContext* context,
      const v1::MemsetTensorRequest* request,
      v1::MemsetTensorResponse* response) override;
  grpc::ServerUnaryReactor* CopyTensor(
      grpc::CallbackServerContext* context,
      const v1::CopyTensorRequest* request,
      v1::CopyTensorResponse* response) override;

  grpc::ServerUnaryReactor* Compute(grpc::CallbackServerContext* context,
                                    const v1::ComputeRequest* request,
                                    v1::ComputeResponse* response) override;
  grpc::ServerUnaryReactor* RegisterGraph(
      grpc::CallbackServerContext* context,
      const v1::RegisterGraphRequest* request,
      v1::RegisterGraphResponse* response) override;
  grpc::ServerBidiReactor<v1::ExecuteRequest, v1::ExecuteResponse>* Execute(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ReleaseGraph(
      grpc::CallbackServerContext* context,
      const v1::ReleaseGraphRequest* request,
      v1::ReleaseGraphResponse* response) override;

  // Collective groups spanning daemons (server/rpc/comm_group_calls.cc).
  grpc::ServerUnaryReactor* NewCommGroupId(
      grpc::CallbackServerContext* context,
      const v1::NewCommGroupIdRequest* request,
      v1::NewCommGroupIdResponse* response) override;
  grpc::ServerUnaryReactor* JoinCommGroup(
      grpc::CallbackServerContext* context,
      const v1::JoinCommGroupRequest* request,
      v1::JoinCommGroupResponse* response) override;
  grpc::ServerUnaryReactor* LeaveCommGroup(
      grpc::CallbackServerContext* context,
      const v1::LeaveCommGroupRequest* request,
      v1::LeaveCommGroupResponse* response) override;
  grpc::ServerUnaryReactor* RunCollective(
      grpc::CallbackServerContext* context,
      const v1::RunCollectiveRequest* request,
      v1::RunCollectiveResponse* response) override;

 private:
  // Finishes a unary call with `status`.
  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context,
                                        const absl::Status& status);
  // Runs `body` on the work queue in the turn of `session` (the request's
  // session id) and finishes the call with its status; a call that fails
  // auth_ finishes at once.
  grpc::ServerUnaryReactor* Offload(grpc::CallbackServerContext* context,
                                    absl::string_view session,
                                    std::function<absl::Status()> body);

  const Registry& registry_;
  SessionManager& sessions_;
  WorkQueue& work_;
  InFlight& in_flight_;
  const Limits limits_;
  const TokenAuth& auth_;
  Metrics& metrics_;
  ContentStore& store_;
  const TensorStreamContext streams_;
  DrainNotice drain_;
  // Calls waiting for the other ranks of a collective group (joins and
  // collectives), at most max_comm_waits_ (half the work queue's threads)
  // at once.
  const int max_comm_waits_;
  std::atomic<int> comm_waits_{0};
  // Group ids made here whose group has not formed here yet.
  absl::Mutex comm_ids_mu_;
  absl::flat_hash_set<std::string> pending_comm_ids_
      ABSL_GUARDED_BY(comm_ids_mu_);
  std::atomic<size_t> execute_streams_{0};
};

}  // namespace tessera::server

#endif  // TESSERA_SERVER_RPC_SERVICE_H_
