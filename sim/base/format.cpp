#include "sim/base/format.h"

#include <array>
#include <cmath>
#include <cstdio>

namespace pipescope {
namespace {

std::string printf_string(const char* fmt, double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}

// Three significant digits.
const char* fmt3(double v) {
  const double a = std::fabs(v);
  return a >= 100 ? "%.0f %s" : a >= 10 ? "%.1f %s" : "%.2f %s";
}

// `value` in the largest of the six `units` (each `step` times the one before)
// that leaves it at least 1: whole in the first unit, three digits in others.
std::string with_prefix(double value, double step, const std::array<const char*, 6>& units) {
  std::size_t u = 0;
  while (std::fabs(value) >= step && u + 1 < units.size()) {
    value /= step;
    ++u;
  }
  if (u == 0) return printf_string("%.0f %s", value, units[0]);
  return printf_string(fmt3(value), value, units[u]);
}

}  // namespace

std::string format_seconds(double s) {
  const double a = std::fabs(s);
  if (a == 0) return "0 s";
  if (a < 1e-6) return printf_string(fmt3(s * 1e9), s * 1e9, "ns");
  if (a < 1e-3) return printf_string(fmt3(s * 1e6), s * 1e6, "us");
  if (a < 1) return printf_string(fmt3(s * 1e3), s * 1e3, "ms");
  return printf_string(fmt3(s), s, "s");
}

std::string format_bytes(double bytes) {
  return with_prefix(bytes, 1024, {"B", "KiB", "MiB", "GiB", "TiB", "PiB"});
}

std::string format_rate(double bytes_per_s) {
  const double a = std::fabs(bytes_per_s);
  if (a >= 1e12) return printf_string(fmt3(bytes_per_s / 1e12), bytes_per_s / 1e12, "TB/s");
  if (a >= 1e9) return printf_string(fmt3(bytes_per_s / 1e9), bytes_per_s / 1e9, "GB/s");
  if (a >= 1e6) return printf_string(fmt3(bytes_per_s / 1e6), bytes_per_s / 1e6, "MB/s");
  return printf_string("%.0f %s", bytes_per_s, "B/s");
}

std::string format_count(double n) {
  const double a = std::fabs(n);
  if (a >= 1e12) return printf_string(fmt3(n / 1e12), n / 1e12, "T");
  if (a >= 1e9) return printf_string(fmt3(n / 1e9), n / 1e9, "B");
  if (a >= 1e6) return printf_string(fmt3(n / 1e6), n / 1e6, "M");
  if (a >= 1e3) return printf_string(fmt3(n / 1e3), n / 1e3, "k");
  return printf_string("%.0f%s", n, "");
}

std::string format_flop_rate(double flop_s) {
  return with_prefix(flop_s, 1000,
                     {"FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s"});
}

std::string format_percent(double frac) {
  return printf_string("%.1f %s", frac * 100, "%");
}

std::string format_signed_percent(double frac) {
  if (!std::isfinite(frac)) return "n/a";
  return printf_string("%+.1f %s", frac * 100, "%");
}

std::string format_fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace pipescope

namespace pipescope {

namespace {

// The three-byte UTF-8 forms of U+200E-U+200F, U+202A-U+202E and
// U+2066-U+2069: E2 80 8E-8F, E2 80 AA-AE, E2 81 A6-A9.
bool is_bidi_control(unsigned b1, unsigned b2) {
  if (b1 == 0x80) return b2 == 0x8E || b2 == 0x8F || (b2 >= 0xAA && b2 <= 0xAE);
  return b1 == 0x81 && b2 >= 0xA6 && b2 <= 0xA9;
}

std::string hex_escape(const char* prefix, unsigned value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, digits, value);
  return buf;
}

}  // namespace

std::string escape_for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto u = static_cast<unsigned char>(text[i]);
    const auto next = [&](std::size_t k) -> unsigned {
      return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u;
    };
    if (u == '\n') {
      out += "\\n";
    } else if (u == '\r') {
      out += "\\r";
    } else if (u == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      out += hex_escape("\\x", u, 2);
    } else if (u == 0xC2 && next(1) >= 0x80 && next(1) <= 0x9F) {  // C1: U+0080-U+009F
      out += hex_escape("\\u", next(1), 4);
      i += 1;
    } else if (u == 0xD8 && next(1) == 0x9C) {  // U+061C, the Arabic letter mark
      out += "\\u061c";
      i += 1;
    } else if (u == 0xE2 && is_bidi_control(next(1), next(2))) {
      out += hex_escape("\\u", 0x2000u + ((next(1) & 0x3Fu) << 6) + (next(2) & 0x3Fu), 4);
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace pipescope
