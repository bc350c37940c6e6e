#include "base/flag_file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag,
                                         const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    return absl::NotFoundError(
        absl::StrCat("--", flag, "=", path, ": cannot be read"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace tessera
