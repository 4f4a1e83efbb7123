#include "exec/runtime.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#ifdef __linux__
#include <time.h>
#endif

#include "exec/affinity.h"
#include "exec/device.h"
#include "exec/device_layers.h"
#include "exec/transport.h"
#include "sim/cancel.h"

namespace pipescope::exec {

StageError::StageError(int stage, Op op, const std::string& what)
    : std::runtime_error(what), stage_(stage), op_(op) {}

// What the runtime owns and its steps' workers use.
struct RuntimeCore {
  std::vector<LayerList> stages;
  Schedule schedule;
  RuntimeOptions options;
  std::vector<ParamOptimizer> optimizers;  // one per stage
  std::vector<Device*> devices;            // per stage: its layers' device, null on the host
};

namespace {

using Clock = std::chrono::steady_clock;

std::string op_name(const Op& op) {
  const std::string letter(1, op_letter(op.kind));
  if (op.kind == OpKind::kOptimizer) return letter + "(" + std::to_string(op.stage) + ")";
  return letter + "(" + std::to_string(op.stage) + "," + std::to_string(op.micro_batch) + ")";
}

// The calling thread's CPU time in ns, or -1 where the clock is missing. Unlike
// wall time it leaves out what the OS or a hypervisor (steal) took away.
SimTime thread_cpu_ns() {
#ifdef __linux__
  timespec t{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return -1;
  return SimTime{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
#else
  return -1;
#endif
}

struct OpStart {
  Clock::time_point wall;
  SimTime cpu = -1;
  std::shared_ptr<Fence> fence;  // a device stage's: where the op's work starts on its stream
};

// An op of a device stage is timed on the device, by the fences around its
// work, once the step is over.
struct DeviceTiming {
  std::size_t event = 0;  // index into the worker's events
  Device* device = nullptr;
  std::shared_ptr<Fence> begin, end;
};

// Each device's fence at the start of the step and when it was made (ns since
// the step's start): the device is idle then, so the two coincide.
struct StepFence {
  std::shared_ptr<Fence> fence;
  SimTime at = 0;
};

// Thrown inside a worker when the step was aborted by another worker's error (or
// by the watchdog, which records its own error first): not an error of its own.
struct Aborted {};

// What a stage keeps between its ops of one step. Only the stage's own device
// thread touches it.
struct StageState {
  std::vector<std::optional<Tensor>> inputs;  // recomputed, stage > 0: the boundary input
  std::vector<char> input_kept;               // recomputed: F ran and B has not yet
  std::vector<std::optional<std::vector<Stash>>> stashes;  // per micro-batch, per layer
  std::vector<WeightGradQueue> deferred;                   // split backward: B ran, its W has not
  std::vector<char> awaits_weight;                         // split backward: B ran and W has not
  double loss = 0.0;                                       // last stage only
};

// A device's current op, for the watchdog's report.
struct DeviceStatus {
  enum class State { kStarting, kRunning, kWaiting, kDone } state = State::kStarting;
  Op op;
};

// One step: the workers, their channels and the first error. Lives for one
// call of PipelineRuntime::step, and longer only when a worker never returns (a
// stage stuck in an op): the workers co-own it, and it co-owns the layers, the
// micro-batches and the transport they use, so an abandoned worker never touches
// freed memory.
class StepRun : public std::enable_shared_from_this<StepRun> {
 public:
  StepRun(std::shared_ptr<RuntimeCore> core, std::vector<MicroBatch> micro_batches,
          std::shared_ptr<Transport> transport)
      : core_(std::move(core)),
        stages_(core_->stages),
        sched_(core_->schedule),
        options_(core_->options),
        optimizers_(core_->optimizers),
        mbs_(std::move(micro_batches)),
        K_(sched_.stages),
        M_(sched_.micro_batches),
        split_(sched_.split),
        transport_owner_(std::move(transport)),
        transport_(*transport_owner_),
        status_(sched_.device_ops.size()),
        events_(sched_.device_ops.size()),
        timings_(sched_.device_ops.size()) {
    std::int64_t tokens = 0;
    for (const MicroBatch& mb : mbs_) tokens += std::int64_t{mb.batch} * mb.seq;
    for (const MicroBatch& mb : mbs_) {
      contexts_.push_back({mb.batch, mb.seq, &mb.targets, 1.0 / static_cast<double>(tokens)});
      inputs_.emplace_back(mb.input);
    }
    state_.resize(static_cast<std::size_t>(K_));
    for (StageState& st : state_) {
      st.inputs.resize(static_cast<std::size_t>(M_));
      st.input_kept.assign(static_cast<std::size_t>(M_), 0);
      st.stashes.resize(static_cast<std::size_t>(M_));
      st.deferred.resize(static_cast<std::size_t>(M_));
      st.awaits_weight.assign(static_cast<std::size_t>(M_), 0);
    }
  }

  // Whether the step ended with workers still running (abandoned).
  bool abandoned() const { return !abandoned_.empty(); }
  const std::string& abandoned_ops() const { return abandoned_; }

  StepResult run() {
    throw_if_cancelled();
    local_ = transport_.local_devices(sched_.devices());
    transport_.begin_step(sched_);
    t0_ = Clock::now();
    for (Device* dev : core_->devices) {
      if (dev != nullptr && step_fences_.count(dev) == 0) {
        step_fences_[dev] = {dev->fence(), ns_since_start(Clock::now())};
      }
    }
    std::vector<std::thread> workers;
    workers.reserve(local_.size());
    running_ = local_.size();
    finished_.assign(local_.size(), 0);
    // One thread alone has no other to drift onto its core; under MPI it is
    // the rank's, which mpirun binds.
    const std::vector<int> cpus = options_.pin_threads && local_.size() >= 2
                                      ? cpus_for_threads(static_cast<int>(local_.size()))
                                      : std::vector<int>{};
    try {
      for (std::size_t i = 0; i < local_.size(); ++i) {
        const int cpu = cpus.empty() ? -1 : cpus[i];
        workers.emplace_back([self = shared_from_this(), i, cpu] {
          if (cpu >= 0) pin_current_thread(cpu);
          self->run_device(self->local_[i]);
          self->worker_done(i);
        });
      }
    } catch (...) {
      abort_step();
      for (std::thread& w : workers) w.join();
      throw;
    }
    wait_for_workers();
    end_workers(workers);
    if (cancelled_.load()) throw Cancelled();
    if (error_) {
      if (abandoned()) {
        throw StageError(error_->stage(), error_->op(),
                         std::string(error_->what()) + "; " + abandoned_ + " did not stop within " +
                             std::to_string(options_.watchdog.count()) +
                             " ms of the error and was abandoned");
      }
      throw *error_;
    }
    return result();
  }

 private:
  SimTime ns_since_start(Clock::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0_).count();
  }
  StageState& state(int stage) { return state_[static_cast<std::size_t>(stage)]; }
  LayerList& layers(int stage) { return stages_[static_cast<std::size_t>(stage)]; }
  const Context& context(int m) const { return contexts_[static_cast<std::size_t>(m)]; }
  void set_status(int device, DeviceStatus::State s, const Op& op) {
    std::lock_guard lock(status_mu_);
    status_[static_cast<std::size_t>(device)] = {s, op};
  }

  void fail(StageError err) {
    {
      std::lock_guard lock(error_mu_);
      if (!error_) error_.emplace(std::move(err));
    }
    abort_step();
  }

  void worker_done(std::size_t i) {
    {
      std::lock_guard lock(running_mu_);
      --running_;
      finished_[i] = 1;
    }
    running_cv_.notify_all();
  }

  // Until every worker has returned. Each worker looks for a stop request
  // (Ctrl-C) before its ops; the calling thread, idle while they run, looks too,
  // for the workers that wait for a payload: either aborts the step, so every
  // worker stops after its current op and the waiting ones wake at once. Once
  // the step is aborted (an error, the watchdog, a stop), the workers get the
  // watchdog's time to finish their ops; one that has not by then is stuck
  // (an op that never ends), and waiting longer would hang the program.
  void wait_for_workers() {
    std::unique_lock lock(running_mu_);
    std::optional<Clock::time_point> give_up;
    while (running_ > 0) {
      if (!give_up && aborted_.load()) give_up = Clock::now() + options_.watchdog;
      if (give_up && Clock::now() >= *give_up) return;
      if (!cancelled_.load() && cancel_requested()) {
        lock.unlock();
        cancel();
        lock.lock();
        continue;
      }
      running_cv_.wait_for(lock, std::chrono::milliseconds(20));
    }
  }

  // Joins the workers that returned; the others, stuck in an op, are detached
  // and named in abandoned_ (they keep this StepRun alive).
  void end_workers(std::vector<std::thread>& workers) {
    std::vector<std::size_t> stuck;
    {
      std::lock_guard lock(running_mu_);
      for (std::size_t i = 0; i < workers.size(); ++i) {
        if (finished_[i] == 0) stuck.push_back(i);
      }
    }
    std::string names;
    for (std::size_t i = 0; i < workers.size(); ++i) {
      if (std::find(stuck.begin(), stuck.end(), i) == stuck.end()) {
        workers[i].join();
        continue;
      }
      workers[i].detach();
      const int d = local_[i];
      Op op;
      {
        std::lock_guard lock(status_mu_);
        op = status_[static_cast<std::size_t>(d)].op;
      }
      names += (names.empty() ? "device " : ", device ") + std::to_string(d) + " (in " +
               op_name(op) + ")";
    }
    abandoned_ = names;
  }

  void cancel() {
    cancelled_.store(true);
    abort_step();
  }

  // Wakes every receiver.
  void abort_step() {
    aborted_.store(true);
    transport_.wake_all();
  }

  void run_device(int d) {
    Op current;
    try {
      for (const Op& op : sched_.device_ops[static_cast<std::size_t>(d)]) {
        current = op;
        if (aborted_.load()) return;
        if (cancel_requested()) {
          cancel();
          return;
        }
        set_status(d, DeviceStatus::State::kRunning, op);
        if (options_.before_op) options_.before_op(d, op);
        run_op(d, op);
      }
      set_status(d, DeviceStatus::State::kDone, current);
    } catch (const Aborted&) {
    } catch (const std::exception& e) {
      fail(StageError(current.stage, current,
                      "stage " + std::to_string(current.stage) + " failed in " + op_name(current) +
                          ": " + e.what()));
    } catch (...) {
      fail(StageError(current.stage, current,
                      "stage " + std::to_string(current.stage) + " failed in " + op_name(current) +
                          ": unknown exception"));
    }
  }

  void run_op(int d, const Op& op) {
    switch (op.kind) {
      case OpKind::kForward:
        return forward(d, op);
      case OpKind::kRecompute:
        return recompute(d, op);
      case OpKind::kBackward:
        return backward(d, op);
      case OpKind::kWeight:
        return weight(d, op);
      case OpKind::kOptimizer: {
        const OpStart start = op_start(op.stage);
        std::vector<Param*> params;
        for (auto& layer : layers(op.stage)) {
          for (Param* p : layer->params()) params.push_back(p);
        }
        optimizers_[static_cast<std::size_t>(op.stage)].step(params);
        record_compute(d, op, start);
        return;
      }
    }
  }

  // Runs the stage's layers on x and checks that every output is finite so the
  // error names the layer that went wrong. With `stashes` each layer's stash is
  // kept there; without, one scratch stash is reused, each layer's dropped as
  // the next one starts (a forward under remat keeps only the stage's input).
  Tensor run_layers(int stage, const Tensor& x, const Context& ctx, std::vector<Stash>* stashes) {
    LayerList& ls = layers(stage);
    if (stashes != nullptr) stashes->resize(ls.size());
    Stash scratch;
    Tensor out;
    // On a device each check waits for the work: one per op, which names the
    // stage; on the host one per layer, which names the layer.
    const bool per_layer = device_of(stage) == nullptr;
    for (std::size_t l = 0; l < ls.size(); ++l) {
      Stash& stash = stashes != nullptr ? (*stashes)[l] : scratch;
      out = ls[l]->forward(l == 0 ? x : out, ctx, stash);
      const bool last = l + 1 == ls.size();
      if ((per_layer || last) && !all_finite(out)) {
        if (stage == K_ - 1 && last) throw std::runtime_error("NaN or inf in loss");
        throw std::runtime_error(per_layer ? "layer '" + ls[l]->name() + "' produced NaN or inf"
                                           : "a layer produced NaN or inf");
      }
    }
    return out;
  }

  void forward(int d, const Op& op) {
    const auto m = static_cast<std::size_t>(op.micro_batch);
    Tensor received;
    if (op.stage > 0) received = receive(d, op, TransferKind::kActivation);
    const Tensor& x = op.stage == 0 ? inputs_[m] : received;
    const OpStart start = op_start(op.stage);
    StageState& st = state(op.stage);
    // Under remat only the boundary input stays live until R rebuilds the
    // stashes; otherwise every layer's stash stays for B.
    const bool recomputed = sched_.recomputes(op.micro_batch);
    std::vector<Stash> stashes;
    Tensor y = run_layers(op.stage, x, context(op.micro_batch), recomputed ? nullptr : &stashes);
    if (recomputed) {
      if (op.stage > 0) st.inputs[m] = std::move(received);
      st.input_kept[m] = 1;
    } else {
      st.stashes[m] = std::move(stashes);
    }
    if (op.stage == K_ - 1) {
      if (y.rows() != 1 || y.cols() != 1) {
        throw std::runtime_error("the last layer must return a (1,1) loss, not (" +
                                 std::to_string(y.rows()) + "," + std::to_string(y.cols()) + ")");
      }
      st.loss += static_cast<double>(y.host()(0, 0));
    }
    record_compute(d, op, start);
    if (op.stage + 1 < K_) send(d, op, TransferKind::kActivation, std::move(y));
  }

  void recompute(int d, const Op& op) {
    const auto m = static_cast<std::size_t>(op.micro_batch);
    const OpStart start = op_start(op.stage);
    StageState& st = state(op.stage);
    if (st.input_kept[m] == 0) {
      throw std::runtime_error(sched_.recomputes(op.micro_batch)
                                   ? "no kept input: F must run before R"
                                   : "R of a micro-batch that remat " +
                                         std::string(to_string(sched_.remat)) +
                                         " does not recompute");
    }
    const Tensor& x = op.stage == 0 ? inputs_[m] : *st.inputs[m];
    std::vector<Stash> stashes;
    run_layers(op.stage, x, context(op.micro_batch), &stashes);
    st.stashes[m] = std::move(stashes);
    record_compute(d, op, start);
  }

  void backward(int d, const Op& op) {
    const auto m = static_cast<std::size_t>(op.micro_batch);
    Tensor dy = op.stage == K_ - 1 ? Tensor(Matrix(Matrix::Constant(1, 1, 1.0f)))
                                   : receive(d, op, TransferKind::kGradient);
    const OpStart start = op_start(op.stage);
    StageState& st = state(op.stage);
    if (!st.stashes[m]) {
      throw std::runtime_error(sched_.recomputes(op.micro_batch) ? "no stash: R must run before B"
                                                                 : "no stash: F must run before B");
    }
    if (st.awaits_weight[m] != 0) throw std::runtime_error("second B before its W");
    LayerList& ls = layers(op.stage);
    const std::vector<Stash>& stashes = *st.stashes[m];
    for (std::size_t l = ls.size(); l-- > 0;) {
      // A split backward leaves the parameters' gradients to W; the stash stays.
      dy = split_ ? ls[l]->backward_input(dy, context(op.micro_batch), stashes[l], st.deferred[m])
                  : ls[l]->backward(dy, context(op.micro_batch), stashes[l]);
      const bool per_layer = device_of(op.stage) == nullptr;
      if ((per_layer || l == 0) && !all_finite(dy)) {
        throw std::runtime_error(per_layer ? "layer '" + ls[l]->name() +
                                                 "' produced a NaN or inf gradient"
                                           : "a layer produced a NaN or inf gradient");
      }
      if (dy.size() == 0 && (l > 0 || op.stage > 0)) {
        throw std::runtime_error("layer '" + ls[l]->name() + "' returned no input gradient");
      }
    }
    if (split_) {
      st.awaits_weight[m] = 1;
    } else {
      release(st, m);
    }
    record_compute(d, op, start);
    if (op.stage > 0) send(d, op, TransferKind::kGradient, std::move(dy));
  }

  // W(s,m): the weight gradients B(s,m) left, then the micro-batch's stash goes.
  void weight(int d, const Op& op) {
    const auto m = static_cast<std::size_t>(op.micro_batch);
    const OpStart start = op_start(op.stage);
    StageState& st = state(op.stage);
    if (!split_) throw std::runtime_error("W needs a schedule that splits the backward");
    if (st.awaits_weight[m] == 0)
      throw std::runtime_error("no input gradient: B must run before W");
    for (const auto& work : st.deferred[m]) work();
    st.deferred[m].clear();
    st.awaits_weight[m] = 0;
    release(st, m);
    record_compute(d, op, start);
  }

  static void release(StageState& st, std::size_t m) {
    st.stashes[m].reset();
    st.inputs[m].reset();
    st.input_kept[m] = 0;
  }

  // Transfer flow ids are unique within a step: one per (direction, boundary,
  // micro-batch).
  std::uint64_t flow_id(TransferKind kind, int boundary, int m) const {
    return static_cast<std::uint64_t>(route_id(kind, boundary)) * static_cast<std::uint64_t>(M_) +
           static_cast<std::uint64_t>(m);
  }

  TimelineEvent transfer_event(int device, Lane lane, TransferKind kind, int from, int to, int m,
                               Bytes bytes) const {
    const int boundary = std::min(from, to);
    TimelineEvent e;
    e.device = device;
    e.lane = lane;
    e.kind = event_kind(kind);
    e.stage = from;
    e.micro_batch = m;
    e.bytes = bytes;
    e.peer_stage = to;
    e.flow = flow_id(kind, boundary, m);
    e.route = route_id(kind, boundary);
    return e;
  }

  void send(int d, const Op& op, TransferKind kind, Tensor payload) {
    const int to = kind == TransferKind::kActivation ? op.stage + 1 : op.stage - 1;
    const Bytes bytes = payload.bytes();
    const auto start = Clock::now();
    // The receiver's device waits for the work that made it.
    if (payload.on_device()) payload.device().ready = payload.device().device()->fence();
    transport_.send(kind, to, op.micro_batch, std::move(payload));
    TimelineEvent e = transfer_event(d, Lane::kSend, kind, op.stage, to, op.micro_batch, bytes);
    e.start = ns_since_start(start);
    e.end = ns_since_start(Clock::now());
    events_[static_cast<std::size_t>(d)].push_back(e);
  }

  // Blocks until the payload of op's micro-batch arrives, the step aborts, or
  // the watchdog expires.
  Tensor receive(int d, const Op& op, TransferKind kind) {
    const int from = kind == TransferKind::kActivation ? op.stage - 1 : op.stage + 1;
    set_status(d, DeviceStatus::State::kWaiting, op);
    const auto start = Clock::now();
    const auto deadline = start + options_.watchdog;
    Tensor payload;
    switch (transport_.take(kind, op.stage, op.micro_batch, deadline, aborted_, payload)) {
      case Channel::Wait::kReady:
        break;
      case Channel::Wait::kAborted:
        throw Aborted{};
      case Channel::Wait::kTimedOut:
        stalled(op);
        throw Aborted{};
    }
    set_status(d, DeviceStatus::State::kRunning, op);
    payload = onto_stage_device(op.stage, std::move(payload));
    const Bytes bytes = payload.bytes();
    TimelineEvent e = transfer_event(d, Lane::kRecv, kind, from, op.stage, op.micro_batch, bytes);
    e.start = ns_since_start(start);
    e.end = ns_since_start(Clock::now());
    events_[static_cast<std::size_t>(d)].push_back(e);
    return payload;
  }

  // A payload where the stage computes: on its device, after the work that made
  // it (copied there when it comes from another device), or on the host.
  Tensor onto_stage_device(int stage, Tensor payload) {
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

  // The watchdog: names what every device is doing, then stops the step.
  void stalled(const Op& op) {
    std::string msg =
        "pipeline stalled (watchdog " + std::to_string(options_.watchdog.count()) + " ms): ";
    {
      std::lock_guard lock(status_mu_);
      for (const int d : local_) {
        const DeviceStatus& s = status_[static_cast<std::size_t>(d)];
        msg += (d == local_.front() ? "device " : "; device ") + std::to_string(d);
        switch (s.state) {
          case DeviceStatus::State::kStarting:
            msg += " has not started";
            break;
          case DeviceStatus::State::kRunning:
            msg += " runs " + op_name(s.op);
            break;
          case DeviceStatus::State::kDone:
            msg += " has finished its ops";
            break;
          case DeviceStatus::State::kWaiting: {
            const bool fwd = s.op.kind == OpKind::kForward;
            msg += " waits in " + op_name(s.op) + " for the " + (fwd ? "activation" : "gradient") +
                   " of micro-batch " + std::to_string(s.op.micro_batch) + " from stage " +
                   std::to_string(fwd ? s.op.stage - 1 : s.op.stage + 1);
            break;
          }
        }
      }
    }
    fail(StageError(op.stage, op, msg));
  }

  OpStart op_start(int stage) const {
    OpStart s;
    if (Device* dev = device_of(stage)) s.fence = dev->fence();
    s.cpu = thread_cpu_ns();
    s.wall = Clock::now();
    return s;
  }

  Device* device_of(int stage) const { return core_->devices[static_cast<std::size_t>(stage)]; }

  // The transport's name for a pipeline device, or where its first stage computes.
  std::string device_name(int d) const {
    for (int s = 0; s < K_; ++s) {
      Device* dev = device_of(s);
      if (sched_.stage_device[static_cast<std::size_t>(s)] == d && dev != nullptr) {
        return "device " + std::to_string(d) + " (" + dev->name() + ")";
      }
    }
    return transport_.device_name(d);
  }

  void record_compute(int d, const Op& op, const OpStart& start) {
    if (start.fence) {
      Device* dev = device_of(op.stage);
      timings_[static_cast<std::size_t>(d)].push_back(
          {events_[static_cast<std::size_t>(d)].size(), dev, start.fence, dev->fence()});
    }
    const SimTime cpu_end = thread_cpu_ns();
    const auto end = Clock::now();
    TimelineEvent e;
    e.device = d;
    e.lane = Lane::kCompute;
    e.kind = event_kind(op.kind);
    e.stage = op.stage;
    e.micro_batch = op.kind == OpKind::kOptimizer ? 0 : op.micro_batch;
    e.start = ns_since_start(start.wall);
    e.end = ns_since_start(end);
    // A device op's host thread only enqueues: its CPU time says nothing.
    if (!start.fence && start.cpu >= 0 && cpu_end >= start.cpu) e.cpu_time = cpu_end - start.cpu;
    events_[static_cast<std::size_t>(d)].push_back(e);
  }

  // Device ops' times from their fences: ns since the step's start, through
  // each device's fence at that start.
  void time_device_ops() {
    for (const auto& [dev, start] : step_fences_) dev->synchronize();
    for (std::size_t d = 0; d < timings_.size(); ++d) {
      for (const DeviceTiming& t : timings_[d]) {
        const StepFence& s = step_fences_.at(t.device);
        TimelineEvent& e = events_[d][t.event];
        e.start = s.at + t.device->elapsed_ns(*s.fence, *t.begin);
        e.end = s.at + t.device->elapsed_ns(*s.fence, *t.end);
      }
    }
  }

  StepResult result() {
    time_device_ops();
    StepResult r;
    for (const StageState& st : state_) r.loss += st.loss;
    Timeline& t = r.timeline;
    for (const auto& evs : events_) t.events.insert(t.events.end(), evs.begin(), evs.end());
    transport_.end_step(r.loss, t);
    for (int d = 0; d < sched_.devices(); ++d) t.device_names.push_back(device_name(d));
    t.route_names.assign(static_cast<std::size_t>(2 * K_), transport_.route_name());
    std::stable_sort(
        t.events.begin(), t.events.end(),
        [](const TimelineEvent& a, const TimelineEvent& b) { return a.start < b.start; });
    std::optional<SimTime> first;
    SimTime last = 0;
    for (const TimelineEvent& e : t.events) {
      if (e.lane != Lane::kCompute) continue;
      first = first ? std::min(*first, e.start) : e.start;
      last = std::max(last, e.end);
    }
    r.step_time = first ? last - *first : 0;
    return r;
  }

  std::shared_ptr<RuntimeCore> core_;
  std::vector<LayerList>& stages_;
  const Schedule& sched_;
  const RuntimeOptions& options_;
  std::vector<ParamOptimizer>& optimizers_;
  const std::vector<MicroBatch> mbs_;
  std::vector<Tensor> inputs_;  // stage 0's input of each micro-batch (host token ids or features)
  const int K_;
  const int M_;
  const bool split_;  // B computes input gradients only; W the weights'
  std::vector<Context> contexts_;
  std::vector<StageState> state_;
  std::shared_ptr<Transport> transport_owner_;
  Transport& transport_;
  std::vector<int> local_;  // the devices this process runs
  std::atomic<bool> aborted_{false};
  std::mutex running_mu_;
  std::condition_variable running_cv_;
  std::size_t running_ = 0;             // workers still in run_device
  std::vector<char> finished_;          // per worker (index into local_): returned
  std::string abandoned_;               // the workers left running, "device 1 (in F(1,2))"
  std::atomic<bool> cancelled_{false};  // the step was stopped on request
  std::mutex status_mu_;
  std::vector<DeviceStatus> status_;
  std::mutex error_mu_;
  std::optional<StageError> error_;
  std::vector<std::vector<TimelineEvent>> events_;  // per device, written by its worker
  std::vector<std::vector<DeviceTiming>> timings_;  // likewise, for device stages' ops
  std::map<Device*, StepFence> step_fences_;        // made before the workers start
  Clock::time_point t0_;
};

void require(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

}  // namespace

PipelineRuntime::PipelineRuntime(std::vector<LayerList> stages, Schedule schedule,
                                 RuntimeOptions options)
    : core_(std::make_shared<RuntimeCore>()) {
  core_->stages = std::move(stages);
  core_->schedule = std::move(schedule);
  core_->options = std::move(options);
  const std::vector<LayerList>& layers = core_->stages;
  const Schedule& sched = core_->schedule;
  const int K = sched.stages;
  const int M = sched.micro_batches;
  require(K >= 1 && M >= 1, "the schedule needs K >= 1 and M >= 1");
  require(static_cast<int>(layers.size()) == K, "the schedule has " + std::to_string(K) +
                                                    " stages but " + std::to_string(layers.size()) +
                                                    " layer lists were given");
  require(static_cast<int>(sched.stage_device.size()) == K,
          "the schedule's stage_device has the wrong size");
  require(core_->options.watchdog.count() > 0, "the watchdog must be positive");
  for (int s = 0; s < K; ++s) {
    const int dev = sched.stage_device[static_cast<std::size_t>(s)];
    require(dev >= 0 && dev < sched.devices(),
            "stage " + std::to_string(s) + " runs on a device the schedule does not have");
    require(!layers[static_cast<std::size_t>(s)].empty(),
            "stage " + std::to_string(s) + " has no layers");
  }
  // Only the shape of the lists is checked here: a list that never completes
  // (a missing F, say) is caught by the watchdog, so tests can exercise it.
  for (int d = 0; d < sched.devices(); ++d) {
    for (const Op& op : sched.device_ops[static_cast<std::size_t>(d)]) {
      require(op.stage >= 0 && op.stage < K, "device " + std::to_string(d) + " lists " +
                                                 op_name(op) + ", whose stage is out of range");
      require(op.kind == OpKind::kOptimizer || (op.micro_batch >= 0 && op.micro_batch < M),
              "device " + std::to_string(d) + " lists " + op_name(op) +
                  ", whose micro-batch is out of range");
      require(sched.stage_device[static_cast<std::size_t>(op.stage)] == d,
              "device " + std::to_string(d) + " lists " + op_name(op) + " of stage " +
                  std::to_string(op.stage) + ", which runs on another device");
    }
  }
  core_->optimizers.assign(static_cast<std::size_t>(K), ParamOptimizer(core_->options.optimizer));
  for (int s = 0; s < K; ++s) {
    try {
      core_->devices.push_back(stage_device(layers[static_cast<std::size_t>(s)]));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("stage " + std::to_string(s) + ": " + e.what());
    }
  }
}

PipelineRuntime::~PipelineRuntime() = default;

const std::vector<LayerList>& PipelineRuntime::stages() const {
  return core_->stages;
}

std::vector<LayerList>& PipelineRuntime::stages() {
  return core_->stages;
}

StepResult PipelineRuntime::step(const std::vector<MicroBatch>& micro_batches) {
  if (!abandoned_.empty()) {
    throw std::logic_error("the pipeline cannot step again: an earlier step left " + abandoned_ +
                           " running");
  }
  const Schedule& schedule = core_->schedule;
  require(static_cast<int>(micro_batches.size()) == schedule.micro_batches,
          "the schedule has " + std::to_string(schedule.micro_batches) + " micro-batches but " +
              std::to_string(micro_batches.size()) + " were given");
  for (std::size_t m = 0; m < micro_batches.size(); ++m) {
    const MicroBatch& mb = micro_batches[m];
    const std::int64_t tokens = std::int64_t{mb.batch} * mb.seq;
    require(mb.batch >= 1 && mb.seq >= 1 && mb.input.rows() == tokens &&
                static_cast<std::int64_t>(mb.targets.size()) == tokens,
            "micro-batch " + std::to_string(m) +
                " needs batch, seq >= 1 and batch*seq input rows and targets");
  }
  std::shared_ptr<Transport> transport = core_->options.transport;
  if (!transport) transport = std::make_shared<InProcessTransport>();
  const auto run = std::make_shared<StepRun>(core_, micro_batches, std::move(transport));
  try {
    return run->run();
  } catch (...) {
    if (run->abandoned()) {
      // A worker still runs an op on these layers: leave them to it.
      abandoned_ = run->abandoned_ops();
      throw;
    }
    // A failed step leaves partial gradient sums; drop them so the next step
    // starts clean. (Stages whose optimizer op already ran keep their update.)
    for (LayerList& ls : core_->stages) {
      for (auto& layer : ls) {
        for (Param* p : layer->params()) zero_grad(*p);
      }
    }
    throw;
  }
}

}  // namespace pipescope::exec
