#include "server/decoding/client_text.h"

#include <string>

#include "gtest/gtest.h"

namespace tessera::server {
namespace {

TEST(ClientTextTest, PlainTextIsKept) {
  EXPECT_EQ(ClientText("llama-runner 0.3 (ünïcode)"),
            "llama-runner 0.3 (ünïcode)");
}

TEST(ClientTextTest, ControlCharactersAreEscaped) {
  EXPECT_EQ(ClientText("a\nINFO forged\r\x1b[31m\x7f"),
            "a\\x0aINFO forged\\x0d\\x1b[31m\\x7f");
  EXPECT_EQ(ClientText(std::string("nul\0here", 8)), "nul\\x00here");
}

TEST(ClientTextTest, LongTextIsCutWithItsLength) {
  const std::string id(1 << 20, 'f');
  const std::string shown = ClientText(id, 32);
  EXPECT_EQ(shown, std::string(32, 'f') + "...(1048576 bytes)");
  EXPECT_EQ(ClientText(std::string(32, 'f'), 32), std::string(32, 'f'));
}

}  // namespace
}  // namespace tessera::server
