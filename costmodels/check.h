#pragma once
// Invariant checks. A failed check is a bug in PipeScope, not bad input: it throws
// InternalError with file:line so the command line can report it; library code
// never exits the process.

#include <stdexcept>
#include <string>

namespace pipescope {

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void fail_check(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace pipescope

#define PS_CHECK(cond, msg)                                                 \
  do {                                                                      \
    if (!(cond)) ::pipescope::fail_check(#cond, __FILE__, __LINE__, (msg)); \
  } while (false)
