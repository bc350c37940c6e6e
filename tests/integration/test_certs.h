#ifndef TESSERA_TESTS_INTEGRATION_TEST_CERTS_H_
#define TESSERA_TESTS_INTEGRATION_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace tessera::testing {

// A throwaway certificate authority with a server certificate (for
// localhost and 127.0.0.1) and a client certificate it signed, made by the
// openssl command in a new temporary directory. Paths and PEM text.
struct TestCerts {
  std::string dir;
  std::string ca_pem, server_pem, server_key, client_pem, client_key;  // paths
  std::string ca, client_cert, client_key_text;                        // PEM
};

// Errors: INTERNAL naming the openssl command that failed.
absl::StatusOr<TestCerts> MakeTestCerts();

// The file's contents, or "" when it cannot be read.
std::string ReadFile(const std::string& path);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_INTEGRATION_TEST_CERTS_H_
