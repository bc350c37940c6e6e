#ifndef TESSERA_TESTS_FUZZ_QUIET_H_
#define TESSERA_TESTS_FUZZ_QUIET_H_

#include "google/protobuf/stubs/logging.h"
#include "spdlog/spdlog.h"

namespace tessera::fuzz {

// Silences the logs that hostile inputs provoke by design (rejected cache
// files, invalid UTF-8 in string fields), so a fuzz run prints its findings
// and not millions of expected warnings.
inline void Quiet() {
  spdlog::set_level(spdlog::level::off);
  google::protobuf::SetLogHandler(nullptr);
}

}  // namespace tessera::fuzz

#endif  // TESSERA_TESTS_FUZZ_QUIET_H_
