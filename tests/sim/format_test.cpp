// Units for people, and text echoed from input files escaped before it
// reaches a terminal.

#include <gtest/gtest.h>

#include <string>

#include "sim/base/format.h"

namespace pipescope {
namespace {

TEST(Format, QuantitiesKeepThreeSignificantDigitsInTheirUnit) {
  EXPECT_EQ(format_seconds(0.0), "0 s");
  EXPECT_EQ(format_seconds(0.00123), "1.23 ms");
  EXPECT_EQ(format_seconds(45.6), "45.6 s");
  EXPECT_EQ(format_bytes(512.0), "512 B");
  EXPECT_EQ(format_bytes(19.3 * 1024 * 1024 * 1024), "19.3 GiB");
  EXPECT_EQ(format_rate(12.0e9), "12.0 GB/s");
  EXPECT_EQ(format_count(1.234e9), "1.23 B");
  EXPECT_EQ(format_count(789.0), "789");
  EXPECT_EQ(format_percent(0.273), "27.3 %");
  EXPECT_EQ(format_fixed(2.7049, 2), "2.70");
}

TEST(Format, FlopRatesUseDecimalPrefixes) {
  EXPECT_EQ(format_flop_rate(42.9e9), "42.9 GFLOP/s");
  EXPECT_EQ(format_flop_rate(312e6), "312 MFLOP/s");
  EXPECT_EQ(format_flop_rate(1.5e15), "1.50 PFLOP/s");
  EXPECT_EQ(format_flop_rate(999.0), "999 FLOP/s");
  EXPECT_EQ(format_flop_rate(0.0), "0 FLOP/s");
}

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
