#pragma once
// Human-readable units for tables and messages (the planner says why a choice
// does not fit: "stage 1 needs 19.3 GiB of 16.0 GiB").

#include <cstdint>
#include <string>
#include <string_view>

namespace pipescope {

std::string format_seconds(double s);            // "1.23 ms", "4.56 s"
std::string format_bytes(double bytes);          // "12.3 GiB", "512 KiB"
std::string format_rate(double bytes_per_s);     // "12.0 GB/s" (decimal, as links are quoted)
std::string format_count(double n);              // "1.23 B", "45.6 M", "789 k"
std::string format_flop_rate(double flop_s);     // "42.9 GFLOP/s", "312 MFLOP/s"
std::string format_percent(double frac);         // "27.3 %"
std::string format_signed_percent(double frac);  // "+27.3 %", "n/a" when not finite
std::string format_fixed(double v, int digits);  // format_fixed(2.7049, 2) = "2.70"

}  // namespace pipescope

namespace pipescope {

// Text from input files or the command line, made safe to print on a terminal
// as one line: control characters (C0, DEL, C1) become \n, \t, \xHH or \u0085,
// and the Unicode controls that reorder or hide text (bidirectional embeddings,
// overrides and isolates, the directional marks) become \uHHHH, so a file name
// or a field cannot forge or hide part of a message.
std::string escape_for_terminal(std::string_view text);

}  // namespace pipescope
