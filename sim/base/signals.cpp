#include "sim/base/signals.h"

#include <signal.h>

#include <atomic>

#include "sim/base/cancel.h"
#include "sim/base/temp_files.h"

namespace pipescope {

namespace {

std::atomic<int> g_stop_signal{0};

void end_by_default(int sig) {
  remove_temp_files_now();
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(sig, &action, nullptr);
  raise(sig);
}

extern "C" void on_stop_signal(int sig) {
  if (cancel_requested()) {
    end_by_default(sig);
    return;
  }
  g_stop_signal.store(sig);
  request_cancel();
}

extern "C" void on_broken_pipe(int sig) {
  end_by_default(sig);
}

void handle(int sig, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(sig, &action, nullptr);
}

}  // namespace

void install_signal_handlers() {
  handle(SIGINT, on_stop_signal);
  handle(SIGTERM, on_stop_signal);
  handle(SIGHUP, on_stop_signal);
  handle(SIGPIPE, on_broken_pipe);
  handle(SIGXFSZ, SIG_IGN);
}

int stop_signal() noexcept {
  return g_stop_signal.load();
}

}  // namespace pipescope
