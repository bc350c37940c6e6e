#ifndef TESSERA_BASE_FLAG_FILE_H_
#define TESSERA_BASE_FLAG_FILE_H_

// The contents of a file named by a command-line flag (certificates, token
// files), for the daemon and the command-line tool alike.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

// The whole of `path`. Errors: NOT_FOUND "--FLAG=PATH: cannot be read".
absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag,
                                         const std::string& path);

}  // namespace tessera

#endif  // TESSERA_BASE_FLAG_FILE_H_
