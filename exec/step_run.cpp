#include "exec/step_run.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "exec/affinity.h"
#include "exec/data.h"
#include "sim/base/cancel.h"

namespace pipescope::exec {

StepRun::StepRun(std::shared_ptr<RuntimeCore> core, std::vector<MicroBatch> micro_batches,
                 std::shared_ptr<Transport> transport)
    : core_(std::move(core)),
      sched_(core_->schedule),
      mbs_(std::move(micro_batches)),
      transport_owner_(std::move(transport)),
      transport_(*transport_owner_),
      watchdog_(core_->options.watchdog, sched_.devices(), transport_, core_->group_ranks()),
      timer_(sched_.devices(), sched_.micro_batches, core_->group_ranks()) {
  share_micro_batches();
  // Rank r's stage s at r K + s (DeviceWorker::stage_work), r = k T + t for
  // share k = e C + c.
  const int T = core_->tensor_parallel();
  stages_.reserve(static_cast<std::size_t>(core_->group_ranks() * sched_.stages));
  for (int r = 0; r < core_->group_ranks(); ++r) {
    const auto k = static_cast<std::size_t>(r / T);
    for (int s = 0; s < sched_.stages; ++s) {
      const auto i = static_cast<std::size_t>(s);
      const auto rank = static_cast<std::size_t>(r);
      TensorGroup* gradients =
          core_->gradient_groups.empty()
              ? nullptr
              : core_->gradient_groups[static_cast<std::size_t>(r % T)][i].get();
      // An expert's C shares: of its rank, or with one expert rank all the
      // shares (the same group as the others' gradients).
      const int C = core_->context_parallel;
      TensorGroup* experts =
          !core_->expert_gradient_groups.empty()
              ? core_->expert_gradient_groups[k / static_cast<std::size_t>(C)][i].get()
          : core_->expert_parallel == 1 ? gradients
                                        : nullptr;
      stages_.emplace_back(
          s, core_->ranks[rank][i], core_->optimizers[rank][i], core_->devices[i], sched_,
          contexts_[k], inputs_[k],
          StageGradients{gradients, static_cast<int>(k), experts, static_cast<int>(k) % C});
    }
  }
}

// Each share's rows of every micro-batch: expert rank e's samples of it
// (all of them for one rank), of each sequence the positions
// Context::position of share c (all of them for one share), and a loss
// scaled by the whole mini-batch's tokens, so that the shares' losses add up
// to the mini-batch's mean.
void StepRun::share_micro_batches() {
  const int C = core_->context_parallel, E = core_->expert_parallel;
  const auto shares = static_cast<std::size_t>(core_->shares());
  std::int64_t tokens = 0;
  for (const MicroBatch& mb : mbs_) tokens += std::int64_t{mb.batch} * mb.seq;
  shares_.resize(shares);
  inputs_.resize(shares);
  contexts_.resize(shares);
  for (std::size_t k = 0; k < shares; ++k) {
    const int e = static_cast<int>(k) / C, c = static_cast<int>(k) % C;
    shares_[k].reserve(mbs_.size());  // the contexts point into it
    for (const MicroBatch& mb : mbs_) {
      const MicroBatch& share =
          shares == 1 ? mb : shares_[k].emplace_back(share_of(samples_of(mb, e, E), c, C));
      contexts_[k].push_back(share_context(share, c, C, tokens));
      inputs_[k].emplace_back(share.input);
    }
  }
}

StepResult StepRun::run() {
  throw_if_cancelled();
  local_ = transport_.local_devices(sched_.devices());
  const std::vector<int> ranks = transport_.local_group_ranks(core_->group_ranks());
  watchdog_.watch(local_, ranks);
  for (const int d : local_) {
    for (const int r : ranks) {
      workers_.emplace_back(d, r, *core_, stages_, transport_, timer_, watchdog_);
    }
  }
  timer_.start(core_->devices, transport_.begin_step(sched_));
  std::vector<std::thread> threads;
  start_workers(threads);
  wait_for_workers();
  end_workers(threads);
  if (watchdog_.cancelled()) throw Cancelled();
  throw_if_failed();
  return result();
}

void StepRun::start_workers(std::vector<std::thread>& threads) {
  const std::size_t n = workers_.size();
  threads.reserve(n);
  running_ = n;
  finished_.assign(n, 0);
  // One thread alone has no other to drift onto its core, but a core may run
  // slower than another for seconds (machine_speed.h): step_worker_cpus.
  const int group = static_cast<int>(transport_.local_group_ranks(core_->group_ranks()).size());
  const std::vector<int> cpus =
      core_->options.pin_threads
          ? step_worker_cpus(static_cast<int>(n), group, static_cast<int>(local_.size()),
                             sched_.devices(), core_->group_ranks())
          : std::vector<int>{};
  start_gate_ = std::make_unique<std::latch>(static_cast<std::ptrdiff_t>(n));
  try {
    for (std::size_t i = 0; i < n; ++i) {
      const int cpu = cpus.empty() ? -1 : cpus[i];
      threads.emplace_back([self = shared_from_this(), i, cpu] {
        if (cpu >= 0) pin_current_thread(cpu);
        self->start_gate_->arrive_and_wait();
        self->workers_[i].run();
        self->worker_done(i);
      });
    }
  } catch (...) {
    // The threads made stop before their first op; the gate opens for them.
    watchdog_.abort();
    start_gate_->count_down(static_cast<std::ptrdiff_t>(n - threads.size()));
    for (std::thread& t : threads) t.join();
    throw;
  }
}

void StepRun::worker_done(std::size_t i) {
  {
    std::lock_guard lock(running_mu_);
    --running_;
    finished_[i] = 1;
  }
  running_cv_.notify_all();
}

// Until every worker has returned. Each worker looks for a stop request
// (Ctrl-C) before its ops; the calling thread, idle while they run, looks too,
// for the workers that wait for a payload: either stops the step, so every
// worker stops after its current op and the waiting ones wake at once. Once the
// step has stopped (an error, the watchdog, a stop request), the workers get the
// watchdog's time to finish their ops; one that has not by then is stuck (an op
// that never ends), and waiting longer would hang the program.
void StepRun::wait_for_workers() {
  std::unique_lock lock(running_mu_);
  std::optional<Watchdog::Clock::time_point> give_up;
  while (running_ > 0) {
    if (!give_up && watchdog_.aborted()) give_up = Watchdog::Clock::now() + watchdog_.limit();
    if (give_up && Watchdog::Clock::now() >= *give_up) return;
    if (!watchdog_.cancelled() && cancel_requested()) {
      lock.unlock();
      watchdog_.cancel();
      lock.lock();
      continue;
    }
    running_cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

// Joins the workers that returned; the others, stuck in an op, are detached and
// named in abandoned_ (they keep this StepRun alive).
void StepRun::end_workers(std::vector<std::thread>& threads) {
  std::vector<std::size_t> stuck;
  {
    std::lock_guard lock(running_mu_);
    for (std::size_t i = 0; i < threads.size(); ++i) {
      if (finished_[i] == 0) stuck.push_back(i);
    }
  }
  std::string names;
  for (std::size_t i = 0; i < threads.size(); ++i) {
    if (std::find(stuck.begin(), stuck.end(), i) == stuck.end()) {
      threads[i].join();
      continue;
    }
    threads[i].detach();
    const int d = workers_[i].device(), r = workers_[i].rank();
    names += (names.empty() ? "" : ", ") + watchdog_.worker_name(d, r) + " (in " +
             op_name(watchdog_.op_of(d, r)) + ")";
  }
  abandoned_ = names;
}

void StepRun::throw_if_failed() const {
  const std::optional<StageError> error = watchdog_.error();
  if (!error) return;
  if (abandoned()) {
    throw StageError(error->stage(), error->op(),
                     std::string(error->what()) + "; " + abandoned_ + " did not stop within " +
                         std::to_string(watchdog_.limit().count()) +
                         " ms of the error and was abandoned");
  }
  throw *error;
}

StepResult StepRun::result() {
  StepResult r;
  Timeline& t = r.timeline;
  t.events = timer_.finish();
  r.ranks = timer_.rank_busy();
  // Every tensor rank computes the same loss: tensor rank 0's stages of each
  // share (rank k T) give the step's, the sum of the shares'.
  const int T = core_->tensor_parallel();
  for (int k = 0; k < core_->shares(); ++k) {
    for (int s = 0; s < sched_.stages; ++s) {
      r.loss += stages_[static_cast<std::size_t>(k * T * sched_.stages + s)].loss();
    }
  }
  transport_.end_step(r.loss, t);
  for (int d = 0; d < sched_.devices(); ++d) t.device_names.push_back(device_name(d));
  t.route_names.assign(static_cast<std::size_t>(2 * sched_.stages), transport_.route_name());
  std::stable_sort(
      t.events.begin(), t.events.end(),
      [](const TimelineEvent& a, const TimelineEvent& b) { return a.start < b.start; });
  std::optional<SimTime> first;
  SimTime last = 0;
  for (const TimelineEvent& e : t.events) {
    if (e.lane != Lane::kCompute && e.lane != Lane::kTensor) continue;
    first = first ? std::min(*first, e.start) : e.start;
    last = std::max(last, e.end);
  }
  // The other tensor ranks' ops are not in the timeline, but the step lasts
  // until the last of them (under MPI, of every process's).
  const Transport::Span span = transport_.merge_span(timer_.compute_span());
  if (span && core_->group_ranks() > 1) {
    first = first ? std::min(*first, span->first) : span->first;
    last = std::max(last, span->second);
  }
  r.step_time = first ? last - *first : 0;
  return r;
}

// The transport's name for a pipeline device, or where its first stage computes.
std::string StepRun::device_name(int d) const {
  for (int s = 0; s < sched_.stages; ++s) {
    Device* dev = core_->devices[static_cast<std::size_t>(s)];
    if (sched_.stage_device[static_cast<std::size_t>(s)] == d && dev != nullptr) {
      return "device " + std::to_string(d) + " (" + dev->name() + ")";
    }
  }
  return transport_.device_name(d);
}

}  // namespace pipescope::exec
