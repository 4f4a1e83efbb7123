#pragma once
// Small helpers the main window's source files share.

#include <exception>
#include <optional>
#include <string>

#include <QString>

namespace pipescope::gui {

inline QString qs(const std::string& s) {
  return QString::fromStdString(s);
}

// Runs `f`, turning any exception into its message.
template <typename F>
std::optional<QString> attempt(F&& f) {
  try {
    f();
    return std::nullopt;
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
}

}  // namespace pipescope::gui
