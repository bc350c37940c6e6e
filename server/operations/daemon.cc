#include "server/operations/daemon.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/assembly/device_spec.h"
#include "google/protobuf/descriptor.h"
#include "base/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/ggml_rpc/protocol.h"
#include "server/ggml_rpc/connection.h"
#include "server/operations/transport_security.h"
#include "spdlog/spdlog.h"

namespace tessera::server {
namespace {

// The full names of the methods the server serves: tessera.v1.Tessera's,
// the health service's, server reflection's and the ggml-rpc commands'
// (whether or not that listener is on).
absl::flat_hash_set<std::string> ServedMethods() {
  absl::flat_hash_set<std::string> methods = {
      "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"};
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::Tessera::service_full_name());
  for (int i = 0; service != nullptr && i < service->method_count(); ++i) {
    methods.insert(
        absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
  }
  for (std::string& label : ggml_rpc::CommandMetricsLabels()) {
    methods.insert(std::move(label));
  }
  return methods;
}

int CpuThreads(const Config& config) {
  if (config.threads > 0) return config.threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

Daemon::Daemon(const Config& config, int threads)
    : limits_(config.limits),
      metrics_(ServedMethods()),
      calls_([this](absl::string_view method, grpc::StatusCode code,
                    absl::Duration duration) {
        metrics_.ObserveCall(method, code, duration);
      }),
      budget_(MemoryAccount::Create("the daemon (its devices' memory)", 0)),
      store_(config.cache_memory, config.cache_dir, budget_),
      sessions_(config.session_idle_timeout, config.limits.max_sessions,
                config.limits.session_memory_quota, budget_),
      work_(std::max(8, 2 * threads)) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const Config& config) {
  const int threads = CpuThreads(config);
  std::unique_ptr<Daemon> daemon(new Daemon(config, threads));
  TESSERA_RETURN_IF_ERROR(CheckExposure(config.listen, config.security));
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           ListenCredentials(config.security));
  if (!config.security.token_file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(daemon->auth_,
                             TokenAuth::FromFile(config.security.token_file));
  }
  // The port listens while the devices open: health answers NOT_SERVING
  // and Hello UNAVAILABLE until they are up. Every other call needs a
  // session, so none touches the registry before then.
  daemon->sessions_.SetAdmission(SessionManager::Admission::kStarting);
  daemon->service_ = std::make_unique<Service>(
      daemon->registry_, daemon->sessions_, daemon->work_, daemon->in_flight_,
      config.limits, daemon->auth_, daemon->metrics_, daemon->store_);
  // grpc.health.v1 and server reflection, answered without a token.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, credentials, &daemon->port_);
  builder.RegisterService(daemon->service_.get());
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(daemon->calls_.NewInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(config.limits.max_message_bytes));
  builder.SetMaxSendMessageSize(
      static_cast<int>(config.limits.max_message_bytes));
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr || daemon->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen));
  }
  grpc::HealthCheckServiceInterface* health =
      daemon->server_->GetHealthCheckService();
  health->SetServingStatus(false);
  spdlog::info("tesserad listening on {} (port {}, {}{}); opening devices",
               config.listen, daemon->port_,
               config.security.tls()
                   ? (config.security.tls_client_ca.empty() ? "TLS"
                                                            : "mutual TLS")
                   : "plaintext",
               daemon->auth_.enabled() ? ", bearer token" : "");

  TESSERA_RETURN_IF_ERROR(
      AddDevices(config.devices, threads, daemon->registry_));
  if (daemon->registry_.devices().empty()) {
    return absl::NotFoundError(
        absl::StrCat("no devices for --devices=", config.devices));
  }
  uint64_t budget = 0;
  for (Device* device : daemon->registry_.devices()) {
    const DeviceProps props = device->Props();
    spdlog::info("device {}: {}, {} MiB", props.name, props.description,
                 props.memory_total >> 20);
    budget += props.memory_total;
  }
  daemon->budget_->set_limit(budget);
  if (!config.metrics_listen.empty()) {
    Daemon* d = daemon.get();
    TESSERA_ASSIGN_OR_RETURN(
        daemon->metrics_http_,
        MetricsHttp::Start(config.metrics_listen,
                           [d] { return d->metrics_.Render(d->Gauges()); }));
    spdlog::info("metrics at http://{}/metrics", config.metrics_listen);
  }
  if (!config.ggml_rpc_listen.empty()) {
    TESSERA_RETURN_IF_ERROR(
        CheckUnauthenticatedExposure(config.ggml_rpc_listen, config.security));
    ggml_rpc::Listener::Options options;
    options.listen = config.ggml_rpc_listen;
    options.max_connections = config.ggml_rpc_max_connections;
    if (!config.cache_dir.empty()) {
      options.cache_dir = absl::StrCat(config.cache_dir, "/ggml-rpc");
    }
    TESSERA_ASSIGN_OR_RETURN(
        daemon->ggml_rpc_,
        ggml_rpc::Listener::Start(
            options, ggml_rpc::Shared{daemon->registry_, daemon->sessions_,
                                      daemon->in_flight_, daemon->metrics_,
                                      daemon->limits_, nullptr}));
    spdlog::info("ggml-rpc {}.{}.{} listening on {} (port {}), at most {} "
                 "connections",
                 ::tessera::ggml_rpc::kVersionMajor,
                 ::tessera::ggml_rpc::kVersionMinor,
                 ::tessera::ggml_rpc::kVersionPatch, config.ggml_rpc_listen,
                 daemon->ggml_rpc_->port(), config.ggml_rpc_max_connections);
  }
  daemon->sessions_.SetAdmission(SessionManager::Admission::kOpen);
  health->SetServingStatus(true);
  spdlog::info("serving");
  return daemon;
}

Metrics::Gauges Daemon::Gauges() const {
  Metrics::Gauges gauges;
  gauges.sessions = sessions_.size();
  gauges.work_in_flight = in_flight_.count();
  for (Device* device : registry_.devices()) {
    const DeviceProps props = device->Props();
    gauges.devices.push_back({.device = props.name,
                              .used = props.memory_total - props.memory_free,
                              .total = props.memory_total});
  }
  return gauges;
}

void Daemon::Drain(absl::Duration timeout) {
  if (server_ == nullptr) return;
  server_->GetHealthCheckService()->SetServingStatus(false);
  sessions_.SetAdmission(SessionManager::Admission::kDraining);
  service_->AnnounceDrain();
  spdlog::info("draining: {} calls and streams at work, waiting up to {}",
               in_flight_.count(), absl::FormatDuration(timeout));
  if (!in_flight_.AwaitIdle(absl::Now() + timeout)) {
    spdlog::warn("draining: {} still at work after {}; cancelling them",
                 in_flight_.count(), absl::FormatDuration(timeout));
  }
  Shutdown(absl::ZeroDuration());
}

void Daemon::Shutdown(absl::Duration grace) {
  metrics_http_.reset();
  ggml_rpc_.reset();
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() +
                    absl::ToChronoNanoseconds(grace));
  server_->Wait();
  server_.reset();
}

Daemon::~Daemon() { Shutdown(absl::Seconds(5)); }

}  // namespace tessera::server
