#include "cli/json_output.h"

#include <iostream>

namespace pipescope::cli {

namespace {
thread_local nlohmann::json* g_capture = nullptr;
}  // namespace

void print_json(const nlohmann::json& document) {
  if (g_capture != nullptr) {
    *g_capture = document;
    return;
  }
  std::cout << document.dump(2) << "\n";
}

JsonCapture::JsonCapture(nlohmann::json& into) {
  g_capture = &into;
}

JsonCapture::~JsonCapture() {
  g_capture = nullptr;
}

}  // namespace pipescope::cli
