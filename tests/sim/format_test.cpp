// Text echoed from input files is escaped before it reaches a terminal.

#include <gtest/gtest.h>

#include <string>

#include "sim/format.h"

namespace pipescope {
namespace {

TEST(EscapeForTerminal, PlainTextAndOrdinaryUnicodeStayAsTheyAre) {
  EXPECT_EQ(escape_for_terminal("model.layers[2].name"), "model.layers[2].name");
  EXPECT_EQ(escape_for_terminal("Größe \u4e2d\u6587 \u2014 \u00e9"),
            "Größe \u4e2d\u6587 \u2014 \u00e9");
}

TEST(EscapeForTerminal, ControlCharactersAreEscaped) {
  EXPECT_EQ(escape_for_terminal("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(escape_for_terminal("\x1b[31mred\x7f"), "\\x1b[31mred\\x7f");
  EXPECT_EQ(escape_for_terminal(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(escape_for_terminal("c1 \u0085 \u009b"), "c1 \\u0085 \\u009b");
}

TEST(EscapeForTerminal, BidirectionalControlsAreEscaped) {
  EXPECT_EQ(escape_for_terminal("a\u202Eb"), "a\\u202eb");
  EXPECT_EQ(escape_for_terminal("\u202A\u202B\u202C\u202D"), "\\u202a\\u202b\\u202c\\u202d");
  EXPECT_EQ(escape_for_terminal("\u2066\u2067\u2068\u2069"), "\\u2066\\u2067\\u2068\\u2069");
  EXPECT_EQ(escape_for_terminal("\u200E\u200F\u061C"), "\\u200e\\u200f\\u061c");
  // Neighbours that are not controls stay: U+2029 and U+2070.
  EXPECT_EQ(escape_for_terminal("\u2029\u2070"), "\u2029\u2070");
}

TEST(EscapeForTerminal, ATruncatedSequenceAtTheEndIsKeptAsBytes) {
  EXPECT_EQ(escape_for_terminal("x\xE2\x80"), "x\xE2\x80");
  EXPECT_EQ(escape_for_terminal("x\xC2"), "x\xC2");
}

}  // namespace
}  // namespace pipescope
