#ifndef TESSERA_SERVER_DECODING_CLIENT_TEXT_H_
#define TESSERA_SERVER_DECODING_CLIENT_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace tessera::server {

// Text a client chose (a client name, a session id, a method name, a
// status message quoting one) made safe for a log line or an error
// message: control characters (bytes below 0x20 and 0x7f) become \xNN so
// no text forges a line, and text longer than `max_bytes` keeps its first
// `max_bytes` bytes followed by "...(N bytes)" with its full length.
std::string ClientText(absl::string_view text, size_t max_bytes = 128);

}  // namespace tessera::server

#endif  // TESSERA_SERVER_DECODING_CLIENT_TEXT_H_
