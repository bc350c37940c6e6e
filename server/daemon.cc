#include "server/daemon.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace tessera::server {
namespace {

int CpuThreads(const Config& config) {
  if (config.threads > 0) return config.threads;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

Daemon::Daemon(const Config& config, int threads)
    : sessions_(config.session_idle_timeout, config.limits.max_sessions),
      work_(std::max(8, 2 * threads)) {}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const Config& config) {
  const int threads = CpuThreads(config);
  std::unique_ptr<Daemon> daemon(new Daemon(config, threads));
  if (absl::Status s = AddDevices(config.devices, threads, daemon->registry_);
      !s.ok()) {
    return s;
  }
  if (daemon->registry_.devices().empty()) {
    return absl::NotFoundError(
        absl::StrCat("no devices for --devices=", config.devices));
  }
  for (Device* device : daemon->registry_.devices()) {
    const DeviceProps props = device->Props();
    spdlog::info("device {}: {}, {} MiB", props.name, props.description,
                 props.memory_total >> 20);
  }
  daemon->service_ = std::make_unique<Service>(
      daemon->registry_, daemon->sessions_, daemon->work_, config.limits);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(),
                           &daemon->port_);
  builder.RegisterService(daemon->service_.get());
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(config.limits.max_message_bytes));
  builder.SetMaxSendMessageSize(
      static_cast<int>(config.limits.max_message_bytes));
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr || daemon->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", config.listen));
  }
  spdlog::info("tesserad listening on {} (port {})", config.listen,
               daemon->port_);
  return daemon;
}

void Daemon::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() +
                    absl::ToChronoNanoseconds(grace));
  server_->Wait();
  server_.reset();
}

Daemon::~Daemon() { Shutdown(absl::Seconds(5)); }

}  // namespace tessera::server
