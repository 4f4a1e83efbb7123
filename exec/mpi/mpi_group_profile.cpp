#include "exec/mpi/mpi_group_profile.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "exec/affinity.h"
#include "exec/compute/host_memory.h"
#include "exec/data.h"
#include "exec/expert_load_profile.h"
#include "exec/expert_shard.h"
#include "exec/gradient_sum.h"
#include "exec/group_op_lists.h"
#include "exec/models.h"
#include "exec/mpi/mpi_group_link.h"
#include "exec/mpi/mpi_poll.h"
#include "exec/mpi/mpi_transport.h"
#include "exec/profile_passes.h"
#include "exec/share_exchange_profile.h"
#include "exec/tensor_shard.h"
#include "exec/transport_profile.h"

namespace pipescope::exec {

namespace {

// The exchange times of a pass as integers, and back.
void pack(const ExchangeTimes& x, std::vector<std::int64_t>& out) {
  out.insert(out.end(), {x.count, x.wall, x.bytes});
}
ExchangeTimes unpack(const std::int64_t* v) {
  return {static_cast<int>(v[0]), v[1], v[2]};
}

// One rank's runs as integers: the runs, then each run's calls (their count,
// then backward, rows, wall of each), its exchanges (count, wall, bytes) and
// its compute (forward, backward).
std::vector<std::int64_t> packed(const std::vector<GroupRun>& runs) {
  std::vector<std::int64_t> out{static_cast<std::int64_t>(runs.size())};
  for (const GroupRun& run : runs) {
    out.push_back(static_cast<std::int64_t>(run.calls.size()));
    for (const ExpertTally::Call& c : run.calls) {
      out.insert(out.end(), {c.backward ? 1 : 0, c.rows, c.wall});
    }
    pack(run.exchanges, out);
    out.insert(out.end(), {run.compute[0], run.compute[1]});
  }
  return out;
}

// The runs `packed` wrote from `at`, which it leaves past them.
std::vector<GroupRun> unpacked(const std::vector<std::int64_t>& v, std::size_t& at) {
  std::vector<GroupRun> out;
  const std::int64_t runs = v.at(at++);
  for (std::int64_t p = 0; p < runs; ++p) {
    GroupRun& run = out.emplace_back();
    const std::int64_t n = v.at(at++);
    for (std::int64_t c = 0; c < n; ++c, at += 3) {
      run.calls.push_back({v.at(at) != 0, v.at(at + 1), v.at(at + 2)});
    }
    if (at + 5 > v.size()) throw std::out_of_range("the group's runs were cut short");
    run.exchanges = unpack(&v[at]);
    run.compute = {v[at + 3], v[at + 4]};
    at += 5;
  }
  return out;
}

// Every rank's runs at rank 0 of `comm`, [rank][run] (empty elsewhere).
std::vector<std::vector<GroupRun>> gathered(const std::vector<GroupRun>& mine, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const std::vector<std::int64_t> out = packed(mine);
  const int count = static_cast<int>(out.size());
  std::vector<int> counts(static_cast<std::size_t>(ranks)), at(static_cast<std::size_t>(ranks));
  mpi_check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm), "MPI_Gather");
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    at[static_cast<std::size_t>(r)] = total;
    total += counts[static_cast<std::size_t>(r)];
  }
  std::vector<std::int64_t> all(static_cast<std::size_t>(rank == 0 ? total : 0));
  mpi_check(MPI_Gatherv(out.data(), count, MPI_INT64_T, all.data(), counts.data(), at.data(),
                        MPI_INT64_T, 0, comm),
            "MPI_Gatherv");
  std::vector<std::vector<GroupRun>> runs;
  std::size_t next = 0;
  for (int r = 0; rank == 0 && r < ranks; ++r) runs.push_back(unpacked(all, next));
  return runs;
}

// Whether rank 0 finds the layers of `processes` processes of the group fit
// its machine's memory, as every rank learns.
bool fits_everywhere(const ModelSpec& spec, std::int64_t batch, int processes) {
  int fits = MpiSession::rank() == 0 &&
             share_exchanges_unfit(spec, batch, host_memory_available(), processes).empty();
  mpi_check(MPI_Bcast(&fits, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return fits != 0;
}

// Whether the job's processes can time a group of `ways` (the model's C or
// E, the other of them and T 1) of a transformer on `processes` (>= ways) of
// them, with `batch` sequences in flight: the job has that many, and their
// layers fit (fits_everywhere).
bool group_measurable(const ModelSpec& spec, int ways, std::int64_t batch, int processes) {
  return ways >= 2 && spec.tensor_parallel == 1 &&
         spec.context_parallel * spec.expert_parallel == ways && spec.transformer != nullptr &&
         MpiSession::size() >= processes && fits_everywhere(spec, batch, processes);
}

// Ranks 0 to n - 1 of the job run body(link), each its rank of a link of
// their own; then every rank meets the others.
void on_first_ranks(int n, const std::function<void(const std::shared_ptr<MpiGroupLink>&)>& body) {
  const int rank = MpiSession::rank();
  MPI_Comm comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &comm),
            "MPI_Comm_split");
  if (comm != MPI_COMM_NULL) body(std::make_shared<MpiGroupLink>(comm));
  MpiSession::wait_for_all();
}

// Device d's op list of `plan` alone (no exchanges) over `layers`: an
// untimed run, then a timed one; its forward and backward totals.
std::array<SimTime, 2> alone_times(LayerList& layers, const PlanStages& plan, int d,
                                   const std::vector<Tensor>& inputs, const Context& ctx,
                                   std::uint64_t seed, const OpClock& clock) {
  run_op_list(layers, plan, d, inputs, ctx, seed, clock, nullptr, nullptr);
  OpListTimes times(layers.size());
  run_op_list(layers, plan, d, inputs, ctx, seed, clock, &times, nullptr);
  return {times.forward_total(), times.backward_total()};
}

// One process's part of mpi_plan_runs: process p of `all` runs rank p / K
// of device p % K, over a link of its device's G processes; time-sliced on
// CPU `spread` where that is one (-1: not time-sliced, where the OS puts it).
struct ProcessRuns {
  std::vector<GroupRun> together;   // one a pair
  std::vector<std::int64_t> alone;  // each pair's rank-alone (forward, backward), or 0s
  std::vector<GroupRun> apart;      // where asked
};
ProcessRuns process_runs(const ModelSpec& spec, const PlanStages& plan, std::int64_t batch,
                         std::uint64_t seed, bool apart, int spread, MPI_Comm all) {
  const int K = plan.schedule.devices();
  int p = 0;
  MPI_Comm_rank(all, &p);
  const int d = p % K, g = p / K;
  MPI_Comm device = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(all, d, g, &device), "MPI_Comm_split");
  const auto link = std::make_shared<MpiGroupLink>(device);
  const TransformerParams& tp = *spec.transformer;
  const int C = spec.context_parallel;
  std::vector<LayerList> ranks =
      spec.expert_parallel > 1
          ? build_expert_ranks(tp, seed, spec.expert_parallel, link, C, spec.context_by_heads)
          : build_context_ranks(tp, seed, 1, C, link, spec.context_by_heads);
  LayerList mine = std::move(ranks[static_cast<std::size_t>(g)]);
  ranks.clear();  // the other ranks' layers, which other processes run
  // The rank alone as the profiler runs it: its inputs, and its layers where
  // this process times them.
  LayerList alone = build_layers(spec, seed);
  const MicroBatch mb =
      last_share(whole_batch(task_shape(spec), static_cast<int>(batch), 0, seed), C);
  const Context ctx = last_share_context(mb, C);
  const std::vector<Tensor> inputs = layer_inputs(alone, mb.input, ctx);
  if (g != 0) alone.clear();
  const OpClock clock = host_op_clock();
  const GroupPlanRuns one{plan, batch, seed, inputs, clock, 1, spread >= 0};
  CollectiveTally tally;
  const CollectiveScope scope(tally);
  ProcessRuns out;
  for (int i = 0; i < kGroupOpListRuns; ++i) {
    // The rank alone's op lists one device after another, then the group's
    // all at once.
    std::array<SimTime, 2> a{0, 0};
    for (int on = 0; on < K; ++on) {
      MpiSession::wait_for_all(all);
      if (g == 0 && d == on) a = alone_times(alone, plan, d, inputs, ctx, seed, clock);
    }
    out.alone.insert(out.alone.end(), {a[0], a[1]});
    // Every device's processes at once, as a step runs them; time-sliced,
    // timed as GroupPlanRuns::crowded says, each on its core of the spread.
    MpiSession::wait_for_all(all);
    const auto together = [&] {
      out.together.push_back(group_device_runs(mine, spec, one, d, g, tally).front());
    };
    if (spread < 0) {
      together();
    } else {
      on_cores(1, {spread}, [&](int) {
        const CollectiveScope here(tally);
        together();
      });
    }
  }
  for (int on = 0; apart && on < K; ++on) {
    MpiSession::wait_for_all(all);
    if (d != on) continue;
    const GroupPlanRuns runs{plan, batch, seed, inputs, clock, kGroupOpListRuns};
    out.apart = group_device_runs(mine, spec, runs, d, g, tally);
  }
  MpiSession::wait_for_all(all);
  return out;
}

// The CPUs `comm`'s processes may run on between them, ascending (the union
// of their allowed CPUs, one node's: mpirun binds each process to a core of
// its own, or none where they outnumber the cores); empty where the system
// cannot say.
std::vector<int> shared_cpus(MPI_Comm comm) {
  constexpr int kWords = 16;  // CPUs 0 to 1023
  std::array<std::uint64_t, kWords> mask{};
  for (const int cpu : allowed_cpus()) {
    if (cpu >= 0 && cpu < 64 * kWords) mask[cpu / 64] |= std::uint64_t{1} << (cpu % 64);
  }
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, mask.data(), kWords, MPI_UINT64_T, MPI_BOR, comm),
            "MPI_Allreduce");
  std::vector<int> out;
  for (int cpu = 0; cpu < 64 * kWords; ++cpu) {
    if ((mask[cpu / 64] >> (cpu % 64) & 1U) != 0) out.push_back(cpu);
  }
  return out;
}

// [process][run] into [rank][run] (by_process_runs').
std::vector<std::vector<GroupRun>> by_rank(std::vector<std::vector<GroupRun>>&& processes, int K,
                                           int G) {
  std::vector<std::vector<GroupRun>> by_device(processes.size());
  for (std::size_t p = 0; p < processes.size(); ++p) {
    const int d = static_cast<int>(p) % K, g = static_cast<int>(p) / K;
    by_device.at(static_cast<std::size_t>(d * G + g)) = std::move(processes[p]);
  }
  return runs_over_devices(by_device, G);
}

// How many of the K devices' groups ran at once in pair `pair` on the mean
// (paired_process_runs' `at_once`).
double devices_at_once(const std::vector<std::vector<GroupRun>>& processes, std::size_t pair,
                       int K) {
  std::vector<double> span(static_cast<std::size_t>(K), 0.0);
  for (std::size_t p = 0; p < processes.size(); ++p) {
    const GroupRun& run = processes[p].at(pair);
    double& s = span[p % static_cast<std::size_t>(K)];
    s = std::max(s, static_cast<double>(run.compute[0] + run.compute[1]));
  }
  const double longest = *std::max_element(span.begin(), span.end());
  if (!(longest > 0.0)) return 1.0;
  return std::accumulate(span.begin(), span.end(), 0.0) / longest;
}

}  // namespace

PairedGroupRuns paired_process_runs(std::vector<std::vector<GroupRun>>&& processes,
                                    const std::vector<std::int64_t>& alone, int K, int G,
                                    bool at_once) {
  std::vector<double> concurrency;
  const std::size_t runs = processes.empty() ? 0 : processes.front().size();
  for (std::size_t i = 0; i < runs; ++i) {
    concurrency.push_back(at_once ? devices_at_once(processes, i, K) : 1.0);
  }
  PairedGroupRuns out;
  out.ranks = by_rank(std::move(processes), K, G);
  for (std::size_t i = 0; i < runs && 2 * i + 1 < alone.size(); ++i) {
    ComputeRatio r = group_over_alone(out.ranks, i, {alone[2 * i], alone[2 * i + 1]});
    r.forward /= concurrency[i];
    r.backward /= concurrency[i];
    if (r.forward > 0.0) out.ratios.push_back(r);
  }
  return out;
}

MpiPlanRuns mpi_plan_runs(const ModelSpec& spec, const PlanStages& plan, std::int64_t batch,
                          std::uint64_t seed) {
  check_group_model(spec, kGroupOpListRuns);  // on every rank, before any collective
  const int G = spec.context_parallel * spec.expert_parallel;
  const int K = plan.schedule.devices();
  MpiPlanRuns out;
  if (!group_measurable(spec, G, batch * plan.schedule.micro_batches, K * G)) return out;
  out.ran = true;
  on_first_ranks(K * G, [&](const std::shared_ptr<MpiGroupLink>& all) {
    const MPI_Comm comm = all->communicator();
    const std::vector<int> cpus = shared_cpus(comm);
    const int cores = static_cast<int>(cpus.size());
    // Only the expert ranks' figures take runs apart (write_expert_plan_figures),
    // and only expert ranks of shares are timed time-sliced.
    const bool both = spec.expert_parallel > 1 && spec.context_parallel > 1;
    const bool crowded = cores > 0 && K * G > cores && spec.expert_parallel > 1 && !both;
    out.time_sliced = cores > 0 && G > cores && both;
    // Time-sliced, the processes run spread evenly over the cores, each
    // device's over all of them, as they settle in a step: left to the OS
    // after the rank alone's runs (the others asleep at a barrier meanwhile),
    // they woke crowded onto fewer cores in about half the runs, which read
    // twice as slow.
    const int d = all->rank() % K, g = all->rank() / K;
    const int spread = out.time_sliced ? spread_cpu(cpus, d * G + g) : -1;
    const ProcessRuns mine = process_runs(spec, plan, batch, seed, crowded, spread, comm);
    std::vector<std::int64_t> alone(mine.alone.size(), 0);
    mpi_check(MPI_Reduce(mine.alone.data(), alone.data(), static_cast<int>(alone.size()),
                         MPI_INT64_T, MPI_SUM, 0, comm),
              "MPI_Reduce");
    std::vector<std::vector<GroupRun>> together = gathered(mine.together, comm);
    std::vector<std::vector<GroupRun>> apart = gathered(mine.apart, comm);
    if (all->rank() != 0) return;
    out.pairs = paired_process_runs(std::move(together), alone, K, G, out.time_sliced);
    if (crowded) out.apart = by_rank(std::move(apart), K, G);
  });
  return out;
}

void measure_mpi_context(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed, const PlanStages* plan) {
  const int C = spec.context_parallel;
  if (!group_measurable(spec, C, batch, C)) return;
  ShareExchanges in_step;  // rank 0's, from the last share
  TransportFigures first_bare;
  TransportFigures first_sum;
  on_first_ranks(C, [&](const std::shared_ptr<MpiGroupLink>& link) {
    const int c = link->rank();
    CollectiveTally tally;
    std::vector<ShareExchanges> mine;
    {  // the layers gone before the gradient sum's buffers come
      std::vector<LayerList> shares =
          build_context_ranks(*spec.transformer, seed, 1, C, link, spec.context_by_heads);
      const CollectiveScope scope(tally);
      mine = share_passes(shares[static_cast<std::size_t>(c)], spec, c, batch, seed,
                          kExchangePasses, tally);
    }
    const TransportFigures bare =
        spec.context_by_heads ? profile_linked_alltoall(link, kGroupRepeats) : TransportFigures{};
    const TransportFigures sum =
        profile_linked_gradient_sum(link, kGroupRepeats, spec.total_params());
    // The last share's median pass, as the threads keep it, to the first.
    const ShareExchanges last = median_pass(std::move(mine));
    std::vector<std::int64_t> figures;
    pack(last.forward, figures);
    pack(last.backward, figures);
    figures.push_back(last.forward_pass);
    figures.push_back(last.backward_pass);
    mpi_check(MPI_Bcast(figures.data(), static_cast<int>(figures.size()), MPI_INT64_T, C - 1,
                        link->communicator()),
              "MPI_Bcast");
    if (c == 0) {
      in_step = {unpack(&figures[0]), unpack(&figures[3]), figures[6], figures[7]};
      first_bare = bare;
      first_sum = sum;
    }
  });
  // A plan's steps keep its micro-batches' stashes in flight: the shares'
  // slowdown from its op lists where the job can run them (their exchanges
  // stay the passes').
  const MpiPlanRuns runs =
      plan != nullptr ? mpi_plan_runs(spec, *plan, batch, seed) : MpiPlanRuns{};
  // Once every rank has left the group (a failure here waits for no one).
  if (MpiSession::rank() == 0) {
    write_context_figures(profile, spec, in_step, batch, [&first_bare] { return first_bare; });
    if (runs.ran) keep_group_slowdown(profile, paired_slowdown(runs.pairs, C, batch, false));
    profile.gradient_sum = {C, first_sum.latency_s, first_sum.bandwidth};
  }
}

void measure_mpi_experts(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed, const PlanStages* plan) {
  const int E = spec.expert_parallel;
  if (!group_measurable(spec, E, batch, E)) return;
  // As the shares': a plan's op lists where the job can run them, passes of
  // one micro-batch otherwise.
  MpiPlanRuns runs = plan != nullptr ? mpi_plan_runs(spec, *plan, batch, seed) : MpiPlanRuns{};
  std::vector<std::vector<GroupRun>> passes;  // every rank's, at rank 0
  TransportFigures bare;
  TransportFigures sum;  // each rank's; rank 0's kept
  on_first_ranks(E, [&](const std::shared_ptr<MpiGroupLink>& link) {
    const int e = link->rank();
    CollectiveTally tally;
    std::vector<GroupRun> mine;
    if (!runs.ran) {  // the layers gone before the gradient sum's buffers come
      std::vector<LayerList> ranks = build_expert_ranks(*spec.transformer, seed, E, link);
      const CollectiveScope scope(tally);
      mine = expert_rank_passes(ranks[static_cast<std::size_t>(e)], spec, e, batch, seed,
                                kExchangePasses, tally);
    }
    bare = profile_linked_alltoall(link, kGroupRepeats);
    sum = profile_linked_gradient_sum(link, kGroupRepeats, spec.total_params());
    passes = gathered(mine, link->communicator());
  });
  // Once every rank has left the group (a failure here waits for no one).
  if (MpiSession::rank() != 0) return;
  if (runs.ran) {
    write_expert_plan_figures(profile, spec, runs.pairs, runs.apart, batch, bare);
  } else {
    write_expert_figures(profile, spec, expert_load_timing(passes, batch), batch, bare);
  }
  profile.gradient_sum = {E, sum.latency_s, sum.bandwidth};
}

void measure_mpi_expert_shares(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                               std::uint64_t seed, const PlanStages* plan) {
  const int C = spec.context_parallel, E = spec.expert_parallel;
  if (C < 2 || E < 2 || !group_measurable(spec, C * E, batch, C * E)) return;
  const MpiPlanRuns runs =
      plan != nullptr ? mpi_plan_runs(spec, *plan, batch, seed) : MpiPlanRuns{};
  TransportFigures sum;  // rank 0's
  on_first_ranks(C * E, [&](const std::shared_ptr<MpiGroupLink>& link) {
    const TransportFigures mine =
        profile_linked_gradient_sum(link, kGroupRepeats, spec.total_params());
    if (link->rank() == 0) sum = mine;
  });
  if (MpiSession::rank() != 0) return;
  if (runs.ran) {
    keep_group_slowdown(profile,
                        paired_slowdown(runs.pairs, C * E, batch, true, C, runs.time_sliced));
  }
  profile.gradient_sum = {C * E, sum.latency_s, sum.bandwidth};
}

}  // namespace pipescope::exec
