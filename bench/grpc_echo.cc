#include "bench/grpc_echo.h"

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/impl/codegen/sync_stream.h"

namespace tessera::bench {
namespace {

constexpr char kMethod[] = "/tessera.bench.Echo/Stream";

class EchoReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  EchoReactor() { StartRead(&message_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    StartWrite(&message_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    StartRead(&message_);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer message_;
};

class EchoService final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    return new EchoReactor;
  }
};

}  // namespace

absl::StatusOr<std::vector<double>> GrpcEcho(size_t size, int n) {
  EchoService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return absl::InternalError("echo server did not start");

  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  grpc::ClientContext context;
  const grpc::internal::RpcMethod method(
      kMethod, grpc::internal::RpcMethod::BIDI_STREAMING, channel);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
      stream(grpc::internal::ClientReaderWriterFactory<
             grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel.get(), method,
                                                         &context));
  const std::string payload(size, 'e');
  std::vector<double> rtts;
  const int warm_up = n / 10 + 1;
  for (int i = 0; i < warm_up + n; ++i) {
    grpc::Slice slice(payload);
    grpc::ByteBuffer out(&slice, 1);
    grpc::ByteBuffer in;
    const auto start = std::chrono::steady_clock::now();
    if (!stream->Write(out) || !stream->Read(&in) || in.Length() != size) {
      return absl::InternalError("the echo stream broke");
    }
    if (i >= warm_up) {
      rtts.push_back(std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count());
    }
  }
  stream->WritesDone();
  if (grpc::Status s = stream->Finish(); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("the echo stream ended: ", s.error_message()));
  }
  server->Shutdown();
  return rtts;
}

}  // namespace tessera::bench
