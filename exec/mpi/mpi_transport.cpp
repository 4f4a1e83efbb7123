#include "exec/mpi/mpi_transport.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "exec/data.h"
#include "exec/models.h"
#include "exec/mpi/mpi_group_link.h"
#include "exec/mpi/mpi_group_profile.h"
#include "exec/mpi/mpi_poll.h"

#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace pipescope::exec {

namespace {

// A payload travels as two messages: its shape (two int64, tag 2t) and then
// its floats (tag 2t + 1), which the receiver takes straight into the Matrix it
// allocates from the shape; neither side copies the floats, and on one host
// OpenMPI's single-copy path (CMA) lets the receiver pull them while the
// sender computes.
int header_tag(int tag) {
  return 2 * tag;
}
int data_tag(int tag) {
  return 2 * tag + 1;
}

void start_send(MPI_Comm comm, int dest, int tag, OutgoingPayload& o) {
  if (o.payload.size() > INT_MAX) {
    throw std::runtime_error("a payload of " + std::to_string(o.payload.size()) +
                             " floats is too large for one MPI message");
  }
  o.shape[0] = o.payload.rows();
  o.shape[1] = o.payload.cols();
  mpi_check(MPI_Isend(o.shape, 2, MPI_INT64_T, dest, header_tag(tag), comm, &o.requests[0]),
            "MPI_Isend");
  mpi_check(MPI_Isend(o.payload.data(), static_cast<int>(o.payload.size()), MPI_FLOAT, dest,
                      data_tag(tag), comm, &o.requests[1]),
            "MPI_Isend");
}

// TimelineEvent as 14 int64s for the gather (-1 for an absent optional).
constexpr int kEventFields = 14;

void put_event(const TimelineEvent& e, std::vector<std::int64_t>& out) {
  out.insert(out.end(),
             {e.device, static_cast<std::int64_t>(e.lane), static_cast<std::int64_t>(e.kind),
              e.stage, e.micro_batch, e.start, e.end, e.bytes, e.peer_stage.value_or(-1),
              e.flow.has_value() ? 1 : 0, static_cast<std::int64_t>(e.flow.value_or(0)),
              e.route.value_or(-1), e.cpu_time.value_or(-1), 0});
}

TimelineEvent get_event(const std::int64_t* f) {
  TimelineEvent e;
  e.device = static_cast<int>(f[0]);
  e.lane = static_cast<Lane>(f[1]);
  e.kind = static_cast<EventKind>(f[2]);
  e.stage = static_cast<int>(f[3]);
  e.micro_batch = static_cast<int>(f[4]);
  e.start = f[5];
  e.end = f[6];
  e.bytes = f[7];
  if (f[8] >= 0) e.peer_stage = static_cast<int>(f[8]);
  if (f[9] != 0) e.flow = static_cast<std::uint64_t>(f[10]);
  if (f[11] >= 0) e.route = static_cast<int>(f[11]);
  if (f[12] >= 0) e.cpu_time = f[12];
  return e;
}

// Receives the payload (source, tag) of start_send into `out`.
Transport::Wait receive(MPI_Comm comm, int source, int tag, Transport::Clock::time_point deadline,
                        const std::atomic<bool>& aborted, Matrix& out,
                        const std::function<void()>& idle) {
  std::int64_t shape[2] = {0, 0};
  const Transport::Wait header = mpi_poll(
      [&] {
        int flag = 0;
        MPI_Message message = MPI_MESSAGE_NULL;
        mpi_check(MPI_Improbe(source, header_tag(tag), comm, &flag, &message, MPI_STATUS_IGNORE),
                  "MPI_Improbe");
        if (flag != 0)
          mpi_check(MPI_Mrecv(shape, 2, MPI_INT64_T, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
        return flag != 0;
      },
      deadline, aborted, idle);
  if (header != Transport::Wait::kReady) return header;
  if (shape[0] < 0 || shape[1] < 0 || (shape[1] > 0 && shape[0] > INT_MAX / shape[1])) {
    throw std::runtime_error("an MPI payload of impossible shape (" + std::to_string(shape[0]) +
                             ", " + std::to_string(shape[1]) + ")");
  }
  out.resize(shape[0], shape[1]);
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Irecv(out.data(), static_cast<int>(out.size()), MPI_FLOAT, source, data_tag(tag),
                      comm, &request),
            "MPI_Irecv");
  const Transport::Wait data = mpi_poll(
      [&] {
        int done = 0;
        mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        return done != 0;
      },
      deadline, aborted, idle);
  if (data != Transport::Wait::kReady) {
    MPI_Cancel(&request);
    MPI_Request_free(&request);
  }
  return data;
}

std::int64_t steady_ns(Transport::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw std::runtime_error(
        "the MPI library gives no MPI_THREAD_SERIALIZED support, which the MPI runtime needs");
  }
}

MpiSession::~MpiSession() {
  MPI_Finalize();
}

int MpiSession::rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int MpiSession::size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void MpiSession::wait_for_all(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
  for (;;) {
    int done = 0;
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

MpiTransport::MpiTransport() {
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag != 0 && ub != nullptr) tag_ub_ = *static_cast<int*>(ub);
  // Host names, to tell whether the ranks share one clock.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<std::size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
  mpi_check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                          MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm_),
            "MPI_Allgather");
  for (int r = 0; r < size_; ++r) {
    const char* h = all.data() + static_cast<std::ptrdiff_t>(r) * MPI_MAX_PROCESSOR_NAME;
    hosts_.emplace_back(h, strnlen(h, MPI_MAX_PROCESSOR_NAME));
    one_host_ = one_host_ && hosts_.back() == hosts_.front();
  }
}

MpiTransport::~MpiTransport() {
  // A step that failed leaves sends nobody will receive; cancel them.
  for (OutgoingPayload& o : pending_) {
    for (MPI_Request& r : o.requests) {
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    }
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::vector<int> MpiTransport::local_devices(int devices) const {
  if (const std::string problem = rank_count_problem(devices, size_, group_ranks_);
      !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  return {rank_ % devices};
}

std::shared_ptr<GroupLink> MpiTransport::link_group(int devices, int group_ranks) {
  if (group_ranks == 1) return nullptr;
  if (link_ && devices == devices_ && group_ranks == group_ranks_) return link_;
  if (link_) throw std::logic_error("the MPI transport's processes are linked already");
  if (const std::string problem = rank_count_problem(devices, size_, group_ranks);
      !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, rank_ % devices, rank_ / devices, &comm), "MPI_Comm_split");
  devices_ = devices;
  group_ranks_ = group_ranks;
  group_rank_ = rank_ / devices;
  link_ = std::make_shared<MpiGroupLink>(comm);
  return link_;
}

std::vector<int> MpiTransport::local_group_ranks(int group_ranks) const {
  if (group_ranks != group_ranks_) {
    throw std::logic_error("the MPI transport runs " + std::to_string(group_ranks_) +
                           " rank(s) of each device's group, not " + std::to_string(group_ranks));
  }
  return {group_rank_};
}

Transport::Clock::time_point MpiTransport::begin_step(const Schedule& schedule) {
  local_devices(schedule.devices());
  if (group_ranks_ > 1 && schedule.devices() != devices_) {
    throw std::invalid_argument("the MPI transport's processes were linked for " +
                                std::to_string(devices_) + " devices, and this schedule has " +
                                std::to_string(schedule.devices()));
  }
  devices_ = schedule.devices();
  stage_device_ = schedule.stage_device;
  // A device's ranks share its routes: rank r's micro-batch m is key m G + r.
  micro_batches_ = schedule.micro_batches * group_ranks_;
  // Two messages (tags) per payload: header_tag / data_tag.
  const std::int64_t largest = 2 * static_cast<std::int64_t>(2 * schedule.stages) * micro_batches_;
  if (largest > tag_ub_) {
    throw std::invalid_argument(
        std::to_string(schedule.stages) +
        " stages (K v) and M=" + std::to_string(schedule.micro_batches) +
        (group_ranks_ > 1 ? " of " + std::to_string(group_ranks_) + " ranks a device" : "") +
        " need more message tags than this MPI library has (" + std::to_string(tag_ub_) + ")");
  }
  mpi_check(MPI_Barrier(comm_), "MPI_Barrier");
  t0_ = Clock::now();
  return t0_;
}

int MpiTransport::tag(TransferKind kind, int to_stage, int micro_batch) const {
  return route_id(kind, to_stage) * micro_batches_ + micro_batch;
}

// The process of `stage`'s device of this process's share or expert rank.
int MpiTransport::rank_of_stage(int stage) const {
  return stage_device_.at(static_cast<std::size_t>(stage)) + group_rank_ * devices_;
}

void MpiTransport::send(TransferKind kind, int to_stage, int micro_batch, Tensor payload) {
  if (payload.on_device()) {
    throw std::logic_error(
        "the MPI transport carries host tensors; device tensors travel through NCCL");
  }
  test_sends();
  OutgoingPayload& o = pending_.emplace_back();
  o.payload = std::move(payload.host());
  try {
    start_send(comm_, rank_of_stage(to_stage), tag(kind, to_stage, micro_batch), o);
  } catch (...) {
    pending_.pop_back();
    throw;
  }
}

void MpiTransport::test_sends() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    mpi_check(MPI_Testall(2, it->requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    it = done != 0 ? pending_.erase(it) : std::next(it);
  }
}

Transport::Wait MpiTransport::take(TransferKind kind, int to_stage, int micro_batch,
                                   Clock::time_point deadline, const std::atomic<bool>& aborted,
                                   Tensor& out) {
  const int from = kind == TransferKind::kActivation ? to_stage - 1 : to_stage + 1;
  Matrix m;
  const Wait w = receive(comm_, rank_of_stage(from), tag(kind, to_stage, micro_batch), deadline,
                         aborted, m, [this] { test_sends(); });
  if (w == Wait::kReady) out = std::move(m);
  return w;
}

void MpiTransport::end_step(double& loss, Timeline& timeline) {
  for (OutgoingPayload& o : pending_) {
    mpi_check(MPI_Waitall(2, o.requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
  }
  pending_.clear();
  double total = 0.0;
  mpi_check(MPI_Allreduce(&loss, &total, 1, MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
  loss = total;
  // On one host every rank reads the same monotonic clock: shift each rank's
  // events by how much later than the earliest rank it started. Across hosts
  // the barrier in begin_step is the alignment.
  const std::int64_t mine = steady_ns(t0_);
  std::int64_t earliest = mine;
  mpi_check(MPI_Allreduce(&mine, &earliest, 1, MPI_INT64_T, MPI_MIN, comm_), "MPI_Allreduce");
  shift_ = one_host_ ? mine - earliest : 0;
  std::vector<std::int64_t> local;
  for (TimelineEvent e : timeline.events) {
    e.start += shift_;
    e.end += shift_;
    put_event(e, local);
  }
  const int count = static_cast<int>(local.size());
  std::vector<int> counts(static_cast<std::size_t>(size_));
  mpi_check(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_), "MPI_Allgather");
  std::vector<int> offsets(static_cast<std::size_t>(size_), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<std::int64_t> all(static_cast<std::size_t>(offsets.back() + counts.back()));
  mpi_check(MPI_Allgatherv(local.data(), count, MPI_INT64_T, all.data(), counts.data(),
                           offsets.data(), MPI_INT64_T, comm_),
            "MPI_Allgatherv");
  timeline.events.clear();
  for (std::size_t i = 0; i + kEventFields <= all.size(); i += kEventFields) {
    timeline.events.push_back(get_event(all.data() + i));
  }
}

Transport::Span MpiTransport::merge_span(Span local) {
  // No compute on a rank: a span no other rank's can lose to.
  std::int64_t first = local ? local->first + shift_ : INT64_MAX;
  std::int64_t last = local ? local->second + shift_ : INT64_MIN;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT64_T, MPI_MIN, comm_), "MPI_Allreduce");
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &last, 1, MPI_INT64_T, MPI_MAX, comm_), "MPI_Allreduce");
  if (first > last) return std::nullopt;
  return std::make_pair(first, last);
}

std::string MpiTransport::device_name(int device) const {
  std::string name = "device " + std::to_string(device) + " (rank " + std::to_string(device);
  if (device >= 0 && device < static_cast<int>(hosts_.size())) {
    name += " on " + hosts_[static_cast<std::size_t>(device)];
  }
  return name + ")";
}

}  // namespace pipescope::exec

namespace pipescope::exec {

TransportFigures profile_mpi_transport(int round_trips) {
  if (round_trips < 1) throw std::invalid_argument("round_trips must be at least 1");
  const int rank = MpiSession::rank();
  if (MpiSession::size() < 2) {
    throw std::invalid_argument(
        "measuring the MPI transport needs two processes or more (mpirun -np 2)");
  }
  MPI_Comm comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  // Payload sizes in floats: 4 B to 4 MiB, as profile_transport.
  const std::vector<Eigen::Index> sizes{1, 1024, 16 * 1024, 256 * 1024, 1024 * 1024};
  const std::atomic<bool> never{false};
  const auto forever = Transport::Clock::now() + std::chrono::hours(24);
  std::vector<double> bytes;
  std::vector<double> one_way_s;
  for (std::size_t i = 0; i < sizes.size() && rank < 2; ++i) {
    const int tag = static_cast<int>(i);
    const int peer = 1 - rank;
    std::vector<SimTime> rtt;
    // One untimed round trip first: connections are set up lazily.
    for (int r = -1; r < round_trips; ++r) {
      Matrix payload = Matrix::Zero(1, sizes[i]);
      const auto t0 = Transport::Clock::now();
      if (rank == 1) {
        if (receive(comm, peer, tag, forever, never, payload, nullptr) != Transport::Wait::kReady) {
          throw std::runtime_error("the MPI transport probe lost a message");
        }
      }
      OutgoingPayload out;
      out.payload = std::move(payload);
      start_send(comm, peer, tag, out);
      if (rank == 0 &&
          receive(comm, peer, tag, forever, never, payload, nullptr) != Transport::Wait::kReady) {
        throw std::runtime_error("the MPI transport probe lost a message");
      }
      mpi_check(MPI_Waitall(2, out.requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
      if (rank == 0 && r >= 0) {
        rtt.push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Transport::Clock::now() - t0)
                .count());
      }
    }
    if (rank == 0) {
      std::sort(rtt.begin(), rtt.end());
      bytes.push_back(static_cast<double>(sizes[i]) * sizeof(float));
      one_way_s.push_back(static_cast<double>(rtt[rtt.size() / 2]) * 0.5e-9);
    }
  }
  // Rank 0's fit goes to everyone.
  double figures[2] = {0.0, 0.0};
  if (rank == 0) {
    const TransportFigures f = fit_transport(bytes, one_way_s);
    figures[0] = f.latency_s;
    figures[1] = f.bandwidth;
  }
  mpi_check(MPI_Bcast(figures, 2, MPI_DOUBLE, 0, comm), "MPI_Bcast");
  MPI_Comm_free(&comm);
  return {figures[0], figures[1]};
}

std::vector<double> measure_mpi_concurrency_slowdown(const ModelSpec& spec, std::int64_t batch,
                                                     std::uint64_t seed) {
  const int rank = MpiSession::rank();
  const int most = std::min(MpiSession::size(), 8);
  LayerList model = build_layers(spec, seed);
  // A rank's share of each sequence under context parallelism, as the
  // profiler's (build_layers builds that rank alone).
  const int C = spec.context_parallel;
  const MicroBatch mb =
      last_share(whole_batch(task_shape(spec), static_cast<int>(batch), 0, seed), C);
  model_pass_s(model, mb, C, seed);  // warm-up
  std::vector<double> out(static_cast<std::size_t>(most), 1.0);
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (int n = 2; n <= most; ++n) {
    // Alone and together in turn, so that a drifting machine affects both; the
    // ranks not computing sleep in wait_for_all.
    std::vector<double> alone;
    std::vector<double> together;
    for (int trial = 0; trial < 3; ++trial) {
      mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
      if (rank == 0) alone.push_back(model_pass_s(model, mb, C, seed));
      MpiSession::wait_for_all();
      mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
      if (rank < n) {
        const double t = model_pass_s(model, mb, C, seed);
        if (rank == 0) together.push_back(t);
      }
      MpiSession::wait_for_all();
    }
    if (rank == 0)
      out[static_cast<std::size_t>(n - 1)] = std::max(1.0, median(together) / median(alone));
  }
  mpi_check(MPI_Bcast(out.data(), most, MPI_DOUBLE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return out;
}

void measure_mpi_machine(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed, const PlanStages* plan) {
  MpiSession::wait_for_all();
  const TransportFigures tr = profile_mpi_transport(200);
  profile.concurrency_slowdown = measure_mpi_concurrency_slowdown(spec, batch, seed);
  measure_mpi_context(profile, spec, batch, seed, plan);
  measure_mpi_experts(profile, spec, batch, seed, plan);
  measure_mpi_expert_shares(profile, spec, batch, seed, plan);
  profile.backend = "mpi";
  profile.transport_latency_s = tr.latency_s;
  profile.transport_bandwidth = tr.bandwidth;
}

}  // namespace pipescope::exec
