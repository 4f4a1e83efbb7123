#include "exec/watchdog.h"

#include "exec/runtime_core.h"

namespace pipescope::exec {

Watchdog::Watchdog(std::chrono::milliseconds limit, int devices, Transport& transport, int ranks)
    : limit_(limit),
      transport_(transport),
      ranks_(ranks),
      status_(static_cast<std::size_t>(devices * ranks)) {}

void Watchdog::watch(std::vector<int> devices, std::vector<int> ranks) {
  watched_ = std::move(devices);
  if (ranks.empty()) {
    for (int r = 0; r < ranks_; ++r) ranks.push_back(r);
  }
  watched_ranks_ = std::move(ranks);
}

void Watchdog::set(int device, int rank, State state, const Op& op) {
  std::lock_guard lock(status_mu_);
  status_[slot(device, rank)] = {state, op};
}

Op Watchdog::op_of(int device, int rank) const {
  std::lock_guard lock(status_mu_);
  return status_[slot(device, rank)].op;
}

std::string Watchdog::worker_name(int device, int rank) const {
  return "device " + std::to_string(device) +
         (ranks_ > 1 ? " rank " + std::to_string(rank) : std::string());
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
  bool first = true;
  for (const int d : watched_) {
    for (const int r : watched_ranks_) {
      msg += (first ? "" : "; ") + worker_name(d, r) + status_text(status_[slot(d, r)]);
      first = false;
    }
  }
  return msg;
}

std::string Watchdog::status_text(const Status& s) {
  switch (s.state) {
    case State::kStarting:
      return " has not started";
    case State::kRunning:
      return " runs " + op_name(s.op);
    case State::kDone:
      return " has finished its ops";
    case State::kWaiting: {
      const bool fwd = s.op.kind == OpKind::kForward;
      return " waits in " + op_name(s.op) + " for the " + (fwd ? "activation" : "gradient") +
             " of micro-batch " + std::to_string(s.op.micro_batch) + " from stage " +
             std::to_string(fwd ? s.op.stage - 1 : s.op.stage + 1);
    }
  }
  return "";
}

}  // namespace pipescope::exec
