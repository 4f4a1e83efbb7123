#include "exec/watchdog.h"

#include "exec/runtime_core.h"

namespace pipescope::exec {

Watchdog::Watchdog(std::chrono::milliseconds limit, int devices, Transport& transport)
    : limit_(limit), transport_(transport), status_(static_cast<std::size_t>(devices)) {}

void Watchdog::set(int device, State state, const Op& op) {
  std::lock_guard lock(status_mu_);
  status_[static_cast<std::size_t>(device)] = {state, op};
}

Op Watchdog::op_of(int device) const {
  std::lock_guard lock(status_mu_);
  return status_[static_cast<std::size_t>(device)].op;
}

void Watchdog::fail(StageError err) {
  {
    std::lock_guard lock(error_mu_);
    if (!error_) error_.emplace(std::move(err));
  }
  abort();
}

void Watchdog::stalled(const Op& op) {
  fail(StageError(op.stage, op, stall_report()));
}

void Watchdog::cancel() {
  cancelled_.store(true);
  abort();
}

void Watchdog::abort() {
  aborted_.store(true);
  transport_.wake_all();
}

std::optional<StageError> Watchdog::error() const {
  std::lock_guard lock(error_mu_);
  return error_;
}

std::string Watchdog::stall_report() const {
  std::string msg = "pipeline stalled (watchdog " + std::to_string(limit_.count()) + " ms): ";
  std::lock_guard lock(status_mu_);
  for (const int d : watched_) {
    const Status& s = status_[static_cast<std::size_t>(d)];
    msg += (d == watched_.front() ? "device " : "; device ") + std::to_string(d);
    switch (s.state) {
      case State::kStarting:
        msg += " has not started";
        break;
      case State::kRunning:
        msg += " runs " + op_name(s.op);
        break;
      case State::kDone:
        msg += " has finished its ops";
        break;
      case State::kWaiting: {
        const bool fwd = s.op.kind == OpKind::kForward;
        msg += " waits in " + op_name(s.op) + " for the " + (fwd ? "activation" : "gradient") +
               " of micro-batch " + std::to_string(s.op.micro_batch) + " from stage " +
               std::to_string(fwd ? s.op.stage - 1 : s.op.stage + 1);
        break;
      }
    }
  }
  return msg;
}

}  // namespace pipescope::exec
