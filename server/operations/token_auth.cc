#include "server/operations/token_auth.h"


#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/flag_file.h"
#include "base/status_macros.h"

namespace tessera::server {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

// Equal contents, in time that depends only on the lengths.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = diff | (static_cast<unsigned char>(a[i]) ^
                   static_cast<unsigned char>(b.empty() ? 0 : b[i % b.size()]));
  }
  return diff == 0;
}

}  // namespace

absl::StatusOr<TokenAuth> TokenAuth::FromFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text,
                           ReadFlagFile("token_file", path));
  const std::string line = text.substr(0, text.find('\n'));
  const std::string token(absl::StripAsciiWhitespace(line));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file=", path, ": the first line holds no token"));
  }
  return TokenAuth(token);
}

absl::Status TokenAuth::Check(const grpc::ServerContextBase& context) const {
  if (token_.empty()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "no \"authorization: Bearer TOKEN\" metadata; this daemon requires a "
        "token");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  if (!absl::StartsWith(value, kBearer) ||
      !ConstantTimeEquals(token_, value.substr(kBearer.size()))) {
    return absl::UnauthenticatedError("the bearer token is wrong");
  }
  return absl::OkStatus();
}

}  // namespace tessera::server
