#include "server/decoding/client_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera::server {

std::string ClientText(absl::string_view text, size_t max_bytes) {
  const absl::string_view kept = text.substr(0, max_bytes);
  std::string out;
  out.reserve(kept.size());
  for (const char c : kept) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    } else {
      out.push_back(c);
    }
  }
  if (kept.size() < text.size()) {
    absl::StrAppend(&out, "...(", text.size(), " bytes)");
  }
  return out;
}

}  // namespace tessera::server
