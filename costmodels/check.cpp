#include "costmodels/check.h"

namespace pipescope {

void fail_check(const char* expr, const char* file, int line, const std::string& msg) {
  throw InternalError(std::string(file) + ":" + std::to_string(line) + ": check failed: " + expr +
                      (msg.empty() ? "" : ": " + msg));
}

}  // namespace pipescope
