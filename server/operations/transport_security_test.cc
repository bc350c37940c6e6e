#include "server/operations/transport_security.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "grpcpp/server_context.h"
#include "server/operations/token_auth.h"

namespace tessera::server {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TransportSecurityTest, LoopbackHosts) {
  for (const char* listen :
       {"127.0.0.1:50051", "127.1.2.3:0", "localhost:1", "[::1]:50051",
        "unix:/run/tesserad.sock"}) {
    EXPECT_TRUE(IsLoopback(listen)) << listen;
  }
  for (const char* listen :
       {"0.0.0.0:50051", "[::]:1", "10.0.0.1:2", "example.com:3"}) {
    EXPECT_FALSE(IsLoopback(listen)) << listen;
  }
}

TEST(TransportSecurityTest, BeyondLoopbackNeedsTlsATokenOrInsecure) {
  Security none;
  absl::Status refused = CheckExposure("0.0.0.0:50051", none);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("--insecure"), absl::string_view::npos);
  EXPECT_TRUE(CheckExposure("127.0.0.1:50051", none).ok());

  Security token;
  token.token_file = "t";
  EXPECT_TRUE(CheckExposure("0.0.0.0:50051", token).ok());
  Security tls;
  tls.tls_cert = "c";
  tls.tls_key = "k";
  EXPECT_TRUE(CheckExposure("0.0.0.0:50051", tls).ok());
  Security insecure;
  insecure.insecure = true;
  EXPECT_TRUE(CheckExposure("0.0.0.0:50051", insecure).ok());
}

TEST(TransportSecurityTest, CredentialFilesAreChecked) {
  EXPECT_TRUE(ListenCredentials(Security{}).ok());
  Security half;
  half.tls_cert = WriteTemp("cert.pem", "x");
  EXPECT_EQ(ListenCredentials(half).status().code(),
            absl::StatusCode::kInvalidArgument);
  Security missing;
  missing.tls_cert = "/nonexistent/cert.pem";
  missing.tls_key = "/nonexistent/key.pem";
  absl::Status s = ListenCredentials(missing).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("--tls_cert"), absl::string_view::npos);
  Security ca_only;
  ca_only.tls_client_ca = half.tls_cert;
  EXPECT_EQ(ListenCredentials(ca_only).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TokenAuthTest, ReadsTheFirstLineOfTheTokenFile) {
  absl::StatusOr<TokenAuth> auth =
      TokenAuth::FromFile(WriteTemp("token", "  s3cret \nignored\n"));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE(auth->enabled());
  EXPECT_EQ(TokenAuth::FromFile(WriteTemp("empty", "\n")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenAuth::FromFile("/nonexistent/token").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TokenAuthTest, ACallWithoutMetadataIsUnauthenticated) {
  grpc::ServerContext context;
  EXPECT_TRUE(TokenAuth().Check(context).ok());
  absl::Status s = TokenAuth("s3cret").Check(context);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(s.message().find("authorization"), absl::string_view::npos);
}

}  // namespace
}  // namespace tessera::server
