#include "tests/integration/test_certs.h"

#include <stdlib.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<TestCerts> MakeTestCerts() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string templ =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tessera-certs-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError("mkdtemp failed");
  }
  TestCerts certs;
  certs.dir = templ;
  auto path = [&](const char* name) { return absl::StrCat(templ, "/", name); };
  certs.ca_pem = path("ca.pem");
  certs.server_pem = path("server.pem");
  certs.server_key = path("server.key");
  certs.client_pem = path("client.pem");
  certs.client_key = path("client.key");
  const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::vector<std::string> commands = {
      absl::StrCat("openssl req -x509 ", key, " -keyout ", path("ca.key"),
                   " -out ", certs.ca_pem,
                   " -days 2 -subj /CN=tessera-test-ca"),
      absl::StrCat("printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ",
                   path("san.ext")),
      absl::StrCat("openssl req ", key, " -keyout ", certs.server_key,
                   " -out ", path("server.csr"), " -subj /CN=localhost"),
      absl::StrCat("openssl x509 -req -in ", path("server.csr"), " -CA ",
                   certs.ca_pem, " -CAkey ", path("ca.key"),
                   " -CAcreateserial -days 2 -extfile ", path("san.ext"),
                   " -out ", certs.server_pem),
      absl::StrCat("openssl req ", key, " -keyout ", certs.client_key,
                   " -out ", path("client.csr"),
                   " -subj /CN=tessera-test-client"),
      absl::StrCat("openssl x509 -req -in ", path("client.csr"), " -CA ",
                   certs.ca_pem, " -CAkey ", path("ca.key"),
                   " -CAcreateserial -days 2 -out ", certs.client_pem),
  };
  for (const std::string& command : commands) {
    if (std::system(absl::StrCat(command, " 2>/dev/null").c_str()) != 0) {
      return absl::InternalError(absl::StrCat("failed: ", command));
    }
  }
  certs.ca = ReadFile(certs.ca_pem);
  certs.client_cert = ReadFile(certs.client_pem);
  certs.client_key_text = ReadFile(certs.client_key);
  return certs;
}

}  // namespace tessera::testing
