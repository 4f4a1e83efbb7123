#include "exec/device_worker.h"

#include <exception>
#include <utility>

#include "sim/base/cancel.h"

namespace pipescope::exec {

namespace {

// Thrown inside a worker when the step was stopped by another worker's error
// (or by the watchdog, which records its own error first): not an error of its
// own.
struct Aborted {};

}  // namespace

DeviceWorker::DeviceWorker(int device, int rank, const RuntimeCore& core,
                           std::vector<StageWork>& stages, Transport& transport, StepTimer& timer,
                           Watchdog& watchdog)
    : device_(device),
      rank_(rank),
      core_(core),
      stages_(stages),
      transport_(transport),
      timer_(timer),
      watchdog_(watchdog) {}

void DeviceWorker::run() {
  Op current;
  collectives_.abort = &watchdog_.abort_flag();
  collectives_.limit = watchdog_.limit();
  const CollectiveScope scope(collectives_);
  try {
    for (const Op& op : core_.schedule.device_ops[static_cast<std::size_t>(device_)]) {
      current = op;
      if (watchdog_.aborted()) return;
      if (cancel_requested()) {
        watchdog_.cancel();
        return;
      }
      watchdog_.set(device_, rank_, Watchdog::State::kRunning, op);
      if (core_.options.before_op) core_.options.before_op(device_, op);
      run_op(op);
    }
    watchdog_.set(device_, rank_, Watchdog::State::kDone, current);
  } catch (const Aborted&) {
  } catch (const CollectiveAborted&) {
  } catch (const std::exception& e) {
    fail(current, e.what());
  } catch (...) {
    fail(current, "unknown exception");
  }
}

void DeviceWorker::fail(const Op& op, const std::string& why) {
  watchdog_.fail(StageError(op.stage, op,
                            "stage " + std::to_string(op.stage) + core_.rank_name(rank_) +
                                " failed in " + op_name(op) + ": " + why));
}

// The op's payload in, its time on the stage, its output out.
void DeviceWorker::run_op(const Op& op) {
  Tensor in = input(op);
  Device* dev = device_of(op.stage);
  collectives_.reset();
  const OpStart start = StepTimer::op_start(dev);
  Tensor out = stage_work(op.stage).run(op, std::move(in));
  timer_.compute(device_, rank_, op, start, dev, &collectives_);
  pair_.finished(op, std::move(out),
                 [this](const Op& done, Tensor output) { send_output(done, std::move(output)); });
}

Tensor DeviceWorker::input(const Op& op) {
  if (op.kind == OpKind::kForward && op.stage > 0) return receive(op, TransferKind::kActivation);
  if (op.kind != OpKind::kBackward) return {};
  // The last stage's loss, differentiated by itself (layer.h).
  if (op.stage == core_.schedule.stages - 1) return Tensor(Matrix(Matrix::Constant(1, 1, 1.0f)));
  return receive(op, TransferKind::kGradient);
}

void DeviceWorker::send_output(const Op& op, Tensor out) {
  if (op.kind == OpKind::kForward && op.stage + 1 < core_.schedule.stages) {
    send(op, TransferKind::kActivation, std::move(out));
  } else if (op.kind == OpKind::kBackward && op.stage > 0) {
    send(op, TransferKind::kGradient, std::move(out));
  }
}

void DeviceWorker::send(const Op& op, TransferKind kind, Tensor payload) {
  const int to = kind == TransferKind::kActivation ? op.stage + 1 : op.stage - 1;
  const Bytes bytes = payload.bytes();
  const auto start = StepTimer::Clock::now();
  // The receiver's device waits for the work that made it.
  if (payload.on_device()) payload.device().ready = payload.device().device()->fence();
  transport_.send(kind, to, channel_key(op.micro_batch), std::move(payload));
  timer_.record(
      timer_.transfer_event(device_, Lane::kSend, kind, op.stage, to, op.micro_batch, bytes), start,
      rank_);
}

// Blocks until the payload of op's micro-batch arrives, the step stops, or the
// watchdog's limit passes.
Tensor DeviceWorker::receive(const Op& op, TransferKind kind) {
  const int from = kind == TransferKind::kActivation ? op.stage - 1 : op.stage + 1;
  watchdog_.set(device_, rank_, Watchdog::State::kWaiting, op);
  const auto start = StepTimer::Clock::now();
  const auto deadline = start + watchdog_.limit();
  Tensor payload;
  switch (transport_.take(kind, op.stage, channel_key(op.micro_batch), deadline,
                          watchdog_.abort_flag(), payload)) {
    case Channel::Wait::kReady:
      break;
    case Channel::Wait::kAborted:
      throw Aborted{};
    case Channel::Wait::kTimedOut:
      watchdog_.stalled(op);
      throw Aborted{};
  }
  watchdog_.set(device_, rank_, Watchdog::State::kRunning, op);
  payload = onto_stage_device(op.stage, std::move(payload));
  const Bytes bytes = payload.bytes();
  timer_.record(
      timer_.transfer_event(device_, Lane::kRecv, kind, from, op.stage, op.micro_batch, bytes),
      start, rank_);
  return payload;
}

// A payload where the stage computes: on its device, after the work that made
// it (copied there when it comes from another device), or on the host.
Tensor DeviceWorker::onto_stage_device(int stage, Tensor payload) const {
  if (!payload.on_device()) return payload;
  Device* dev = device_of(stage);
  if (dev == nullptr) return to_host(payload);
  DeviceMatrix& p = payload.device();
  if (p.ready) dev->wait(*p.ready);
  if (p.device() == dev) return payload;
  DeviceMatrix local = dev->matrix(p.rows, p.cols);
  dev->copy_from(p, local);
  return local;
}

StageWork& DeviceWorker::stage_work(int stage) const {
  return stages_[static_cast<std::size_t>(rank_ * core_.schedule.stages + stage)];
}

// The ranks of a stage share its channels: rank r's payload of micro-batch m
// travels under key m E C T + r, to rank r of the next stage.
int DeviceWorker::channel_key(int micro_batch) const {
  return micro_batch * core_.group_ranks() + rank_;
}

Device* DeviceWorker::device_of(int stage) const {
  return core_.devices[static_cast<std::size_t>(stage)];
}

}  // namespace pipescope::exec
