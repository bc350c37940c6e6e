#include "server/operations/transport_security.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/flag_file.h"

namespace tessera::server {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenCredentials(
    const Security& security) {
  if (security.tls_cert.empty() != security.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both or neither");
  }
  if (!security.tls()) {
    if (!security.tls_client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs --tls_cert and --tls_key");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options(
      security.tls_client_ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  auto cert = ReadFlagFile("tls_cert", security.tls_cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadFlagFile("tls_key", security.tls_key);
  if (!key.ok()) return key.status();
  pair.cert_chain = *std::move(cert);
  pair.private_key = *std::move(key);
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!security.tls_client_ca.empty()) {
    auto ca = ReadFlagFile("tls_client_ca", security.tls_client_ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  return grpc::SslServerCredentials(options);
}

bool IsLoopback(const std::string& listen) {
  // A Unix domain socket is reachable from this machine only.
  if (absl::StartsWith(listen, "unix:")) return true;
  absl::string_view host = listen;
  if (const size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  return host == "localhost" || host == "::1" ||
         absl::StartsWith(host, "127.");
}

absl::Status CheckExposure(const std::string& listen,
                           const Security& security) {
  if (IsLoopback(listen) || security.tls() || !security.token_file.empty() ||
      security.insecure) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on ", listen,
      " beyond loopback with neither TLS nor a token: anyone who reaches it "
      "could use and read this machine's devices. Give --tls_cert and "
      "--tls_key, or --token_file, or --insecure to listen anyway"));
}

absl::Status CheckUnauthenticatedExposure(const std::string& listen,
                                          const Security& security) {
  if (IsLoopback(listen) || security.insecure) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to serve ggml-rpc on ", listen,
      " beyond loopback: the protocol has no authentication, so anyone who "
      "reaches it could use and read this machine's devices. Give --insecure "
      "to listen anyway"));
}

}  // namespace tessera::server
