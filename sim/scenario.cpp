#include "sim/scenario.h"

namespace pipescope {

std::string_view to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::kGpipe:
      return "gpipe";
  }
  return "unknown";
}

std::optional<ScheduleKind> parse_schedule(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::kGpipe;
  return std::nullopt;
}

}  // namespace pipescope
