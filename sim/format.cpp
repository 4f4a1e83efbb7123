#include "sim/format.h"

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
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  if (u == 0) return printf_string("%.0f %s", bytes, units[0]);
  return printf_string(fmt3(bytes), bytes, units[u]);
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

std::string format_percent(double frac) {
  return printf_string("%.1f %s", frac * 100, "%");
}

std::string format_fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace pipescope
