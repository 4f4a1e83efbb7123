#pragma once
// What the MPI tests of a device's group of processes share (expert ranks,
// context shares): a small model trained with each device's G ranks as
// processes of their own (rank g K + d running rank g of device d) and with
// the threaded runtime (G threads a device), and the check that the job's
// losses and the parameters of its rank's stages agree within 1e-6
// (relative). And the whole job as one linked group.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec/data.h"
#include "exec/group_op_lists.h"
#include "exec/models.h"
#include "exec/mpi/mpi_group_link.h"
#include "exec/mpi/mpi_group_profile.h"
#include "exec/mpi/mpi_transport.h"
#include "exec/profile_passes.h"
#include "exec/runtime.h"
#include "sim/engine/partition.h"
#include "sim/engine/schedule.h"

namespace pipescope::exec::mpi_group {

inline constexpr int kSteps = 2;

// Every process of the job, linked as one group.
inline std::shared_ptr<GroupLink> whole_job() {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return std::make_shared<MpiGroupLink>(comm);
}

// A group model: the model, its G = C or E ranks a device, and how the test
// builds them (every rank's layers, made with `link` where they are
// processes).
struct GroupModel {
  TransformerParams params;
  int context_parallel = 1;
  int expert_parallel = 1;
  int samples = 4;  // a micro-batch's, every rank's together
  std::uint64_t seed = 1;
  std::function<std::vector<LayerList>(const std::shared_ptr<GroupLink>&)> build;
  int group_ranks() const { return context_parallel * expert_parallel; }
};

struct Training {
  std::vector<double> losses;
  std::map<int, std::vector<std::vector<float>>> params;  // per stage, of the rank checked
};

// The job's K = size / G devices: over MPI with `transport`, or as threads;
// the parameters kept are rank `rank`'s.
inline Training train(const GroupModel& g, ScheduleKind kind, Remat remat,
                      std::shared_ptr<Transport> transport, int rank) {
  const int G = g.group_ranks(), K = MpiSession::size() / G, M = 2;
  const std::shared_ptr<GroupLink> link = transport ? transport->link_group(K, G) : nullptr;
  std::vector<std::vector<LayerList>> ranks;
  for (LayerList& layers : g.build(link)) {
    const int L = static_cast<int>(layers.size());
    ranks.push_back(cut_into_stages(std::move(layers), partition_uniform(L, K)));
  }
  RuntimeOptions options;
  options.optimizer.kind = Optimizer::kMomentum;
  options.optimizer.learning_rate = 0.1;
  options.watchdog = std::chrono::milliseconds(60000);
  options.transport = std::move(transport);
  PipelineRuntime runtime(std::move(ranks), build_schedule(kind, K, M, remat), options,
                          g.context_parallel, g.expert_parallel);
  TaskShape task;
  task.seq_len = static_cast<int>(g.params.seq_len);
  task.vocab = static_cast<int>(g.params.vocab);
  Training out;
  for (int step = 0; step < kSteps; ++step) {
    try {
      out.losses.push_back(
          runtime
              .step(synthetic_batch(task, g.samples, M, static_cast<std::uint64_t>(step), g.seed))
              .loss);
    } catch (const std::exception& e) {
      // Another rank would wait for this one: end the job rather than hang it.
      std::cerr << "rank " << MpiSession::rank() << ": " << e.what() << std::endl;
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  for (int s = 0; s < K; ++s) {
    for (auto& layer : runtime.stages(rank)[static_cast<std::size_t>(s)]) {
      for (Param* prm : layer->params()) {
        out.params[s].emplace_back(prm->value.data(), prm->value.data() + prm->value.size());
      }
    }
  }
  return out;
}

// Trains `g` over MPI and as threads; the losses and this process's stage's
// parameters must agree.
inline void expect_threaded_training(const GroupModel& g, ScheduleKind kind, Remat remat) {
  const int G = g.group_ranks();
  if (MpiSession::size() % G != 0) {
    GTEST_SKIP() << "needs a multiple of " << G << " processes";
  }
  const int K = MpiSession::size() / G;
  const int device = MpiSession::rank() % K, rank = MpiSession::rank() / K;
  const Training mpi = train(g, kind, remat, std::make_shared<MpiTransport>(), rank);
  const Training threads = train(g, kind, remat, nullptr, rank);
  ASSERT_EQ(mpi.losses.size(), threads.losses.size());
  for (std::size_t i = 0; i < mpi.losses.size(); ++i) {
    EXPECT_NEAR(mpi.losses[i], threads.losses[i], 1e-6 * std::abs(threads.losses[i]))
        << "step " << i;
  }
  EXPECT_NEAR(threads.losses.front(), std::log(static_cast<double>(g.params.vocab)), 0.5);
  EXPECT_NE(mpi.losses.front(), mpi.losses.back());  // it trained
  // Stage `device` is this process's (one stage a device).
  const auto& got = mpi.params.at(device);
  const auto& want = threads.params.at(device);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t p = 0; p < want.size(); ++p) {
    float scale = 0.0f;
    for (float w : want[p]) scale = std::max(scale, std::abs(w));
    for (std::size_t i = 0; i < want[p].size(); ++i) {
      ASSERT_NEAR(got[p][i], want[p][i], 1e-6f * scale) << "stage " << device << " param " << p;
    }
  }
}

// A plan's op lists run by `m`'s group (one share or expert rank, G = 2) as
// processes (mpi_plan_runs) against the same runs as threads
// (group_op_list_runs, one run: the same micro-batches): 1F1B with remat
// over one device of M = 3, then over K = 2 (embedding and block 0, then the
// rest) where the job has the 4 processes. Every rank's runs count the
// threads' exchanges, of their bytes, and make their mixture calls of their
// rows; every pair timed both sides. Where expert ranks' processes
// outnumber their cores (certainly where they outnumber the machine's), the
// runs of one device's ranks at a time count what the threads' runs so
// count, run by run.
inline void expect_op_lists_as_threads(const ModelSpec& m, std::uint64_t seed) {
  constexpr std::int64_t kBatch = 4;
  const std::size_t L = m.layers.size();
  const PlanStages one{build_1f1b(1, 3, Remat::kAlways), {{0, L}}};
  const PlanStages two{build_1f1b(2, 3, Remat::kAlways), {{0, 2}, {2, L}}};
  for (const PlanStages* plan : {&one, &two}) {
    const int K = plan->schedule.devices();
    const MpiPlanRuns mpi = mpi_plan_runs(m, *plan, kBatch, seed);
    ASSERT_EQ(mpi.ran, MpiSession::size() >= 2 * K) << "K=" << K;
    if (!mpi.ran || MpiSession::rank() != 0) {
      EXPECT_TRUE(mpi.pairs.ranks.empty());
      continue;
    }
    LayerList alone = build_layers(m, seed);
    const MicroBatch mb = last_share(whole_batch(task_shape(m), static_cast<int>(kBatch), 0, seed),
                                     m.context_parallel);
    const std::vector<Tensor> inputs =
        layer_inputs(alone, mb.input, last_share_context(mb, m.context_parallel));
    const GroupPlanRuns r{*plan, kBatch, seed, inputs, host_op_clock(), kGroupOpListRuns};
    // Each pair's group runs on the first run's micro-batches, the runs apart
    // on one a run.
    const std::vector<std::vector<exec::GroupRun>> threads =
        group_op_list_runs(m, {*plan, kBatch, seed, inputs, host_op_clock(), 1});
    EXPECT_EQ(mpi.pairs.ratios.size(), static_cast<std::size_t>(kGroupOpListRuns)) << "K=" << K;
    const auto expect_as_threads = [&](const std::vector<std::vector<exec::GroupRun>>& ranks,
                                       const std::vector<std::vector<exec::GroupRun>>& as,
                                       bool paired) {
      ASSERT_EQ(ranks.size(), as.size());
      for (std::size_t g = 0; g < ranks.size(); ++g) {
        ASSERT_EQ(ranks[g].size(), static_cast<std::size_t>(kGroupOpListRuns));
        for (std::size_t i = 0; i < ranks[g].size(); ++i) {
          const exec::GroupRun& run = ranks[g][i];
          const exec::GroupRun& t = as[g].at(paired ? 0 : i);
          EXPECT_EQ(run.exchanges.count, t.exchanges.count) << "K=" << K << " rank " << g;
          EXPECT_EQ(run.exchanges.bytes, t.exchanges.bytes) << "K=" << K << " rank " << g;
          ASSERT_EQ(run.calls.size(), t.calls.size()) << "K=" << K << " rank " << g;
          for (std::size_t c = 0; c < t.calls.size(); ++c) {
            EXPECT_EQ(run.calls[c].rows, t.calls[c].rows) << "K=" << K << " call " << c;
            EXPECT_EQ(run.calls[c].backward, t.calls[c].backward) << "K=" << K << " call " << c;
          }
          EXPECT_GT(run.compute[0], 0);
          EXPECT_GT(run.compute[1], 0);
        }
      }
    };
    expect_as_threads(mpi.pairs.ranks, threads, true);
    // Expert ranks' processes beyond the machine's CPUs certainly share
    // cores; the shares take no runs apart.
    if (m.context_parallel > 1) {
      EXPECT_TRUE(mpi.apart.empty()) << "K=" << K;
    }
    if (m.expert_parallel > 1 &&
        static_cast<unsigned>(2 * K) > std::thread::hardware_concurrency()) {
      EXPECT_FALSE(mpi.apart.empty()) << "K=" << K;
    }
    if (!mpi.apart.empty()) expect_as_threads(mpi.apart, group_op_list_runs(m, r, false), false);
    EXPECT_GT(threads.front().front().exchanges.count, 0);
  }
}

// Up to three profiles from `measure(profile)`, every rank calling it, for
// one whose group slowdown rank 0 kept: a machine busy with other work
// gives an implausible one, which the profile drops (keep_group_slowdown),
// as the threaded profile's tests also try again. Every rank learns rank
// 0's verdict.
inline Profile with_kept_slowdown(const std::function<void(Profile&)>& measure) {
  Profile p;
  for (int tries = 0; tries < 3; ++tries) {
    p = Profile{};
    measure(p);
    int kept = MpiSession::rank() == 0 && p.group_slowdown.ranks > 0 ? 1 : 0;
    MPI_Bcast(&kept, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (kept != 0) break;
  }
  return p;
}

}  // namespace pipescope::exec::mpi_group
