#ifndef TESSERA_TESTS_INTEGRATION_SHELL_H_
#define TESSERA_TESTS_INTEGRATION_SHELL_H_

// What integration tests do as a shell would: run a command and keep what
// it prints, and write a file for a flag to name.

#include <string>

namespace tessera::testing {

struct CommandRun {
  int exit_code = -1;  // -1 when the command did not exit normally
  std::string output;  // its standard output
};

// Runs `command` with /bin/sh and waits for it.
CommandRun RunCommand(const std::string& command);

// Writes `bytes` to `name` in the test's temporary directory; returns the
// path.
std::string WriteTempFile(const std::string& name, const std::string& bytes);

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_INTEGRATION_SHELL_H_
