// The MPI runtime against the threaded CPU backend. ctest runs this program under
// `mpirun -np 2` and `-np 4`: the job is one pipeline of K = (number of ranks)
// devices, device d on rank d. Every rank also trains the same model with the
// threaded runtime in its own process and checks that the MPI job's loss and the
// parameters of the stages it holds agree within 1e-6 (relative). The job fails
// when any rank fails.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <utility>

#include "../tiny_models.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/mpi/mpi_transport.h"
#include "exec/runtime.h"
#include "sim/engine/partition.h"

namespace pipescope::exec {
namespace {

constexpr int kBatch = 8;
constexpr int kSteps = 3;
constexpr std::uint64_t kSeed = 7;

// 8 blocks + embedding and head: 10 layers, enough for 4 devices x 2 chunks.
TransformerParams small_transformer() {
  return testing::tiny_executor_transformer_params(8);
}

struct Case {
  ScheduleKind schedule;
  int M;
  Remat remat;
  int chunks = 1;
};

struct Training {
  std::vector<double> losses;
  std::map<int, std::vector<std::vector<float>>> params;  // per stage
  Timeline last;
  Schedule schedule;
};

Training train(const Case& c, std::shared_ptr<Transport> transport) {
  const int K = MpiSession::size();
  const TransformerParams p = small_transformer();
  LayerList all = build_transformer(p, kSeed);
  const int layers = static_cast<int>(all.size());
  std::vector<LayerList> stages =
      cut_into_stages(std::move(all), partition_uniform(layers, K * c.chunks));
  Training out;
  out.schedule = build_schedule(c.schedule, K, c.M, c.remat, c.chunks);
  RuntimeOptions options;
  options.optimizer.kind = Optimizer::kMomentum;
  options.optimizer.learning_rate = 0.1;
  options.watchdog = std::chrono::milliseconds(60000);
  options.transport = std::move(transport);
  PipelineRuntime runtime(std::move(stages), out.schedule, options);
  TaskShape task;
  task.seq_len = static_cast<int>(p.seq_len);
  task.vocab = static_cast<int>(p.vocab);
  for (int step = 0; step < kSteps; ++step) {
    try {
      StepResult r =
          runtime.step(synthetic_batch(task, kBatch, c.M, static_cast<std::uint64_t>(step), kSeed));
      out.losses.push_back(r.loss);
      out.last = std::move(r.timeline);
    } catch (const std::exception& e) {
      // Another rank would wait for this one: end the job rather than hang it.
      std::cerr << "rank " << MpiSession::rank() << ": " << e.what() << std::endl;
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  for (int s = 0; s < static_cast<int>(runtime.stages().size()); ++s) {
    for (auto& layer : runtime.stages()[static_cast<std::size_t>(s)]) {
      for (Param* prm : layer->params()) {
        out.params[s].emplace_back(prm->value.data(), prm->value.data() + prm->value.size());
      }
    }
  }
  return out;
}

class MpiRuntime : public ::testing::TestWithParam<Case> {};

TEST_P(MpiRuntime, MatchesTheThreadedBackend) {
  const Case c = GetParam();
  const Training mpi = train(c, std::make_shared<MpiTransport>());
  const Training threads = train(c, nullptr);
  ASSERT_EQ(mpi.losses.size(), threads.losses.size());
  for (std::size_t i = 0; i < mpi.losses.size(); ++i) {
    EXPECT_NEAR(mpi.losses[i], threads.losses[i], 1e-6 * std::abs(threads.losses[i]))
        << "step " << i;
  }
  EXPECT_NEAR(threads.losses.front(), std::log(13.0), 0.5);  // a real loss
  // The parameters of the stages this rank ran (the others it never touched).
  const int rank = MpiSession::rank();
  int checked = 0;
  for (std::size_t s = 0; s < mpi.schedule.stage_device.size(); ++s) {
    if (mpi.schedule.stage_device[s] != rank) continue;
    const auto& got = mpi.params.at(static_cast<int>(s));
    const auto& want = threads.params.at(static_cast<int>(s));
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t p = 0; p < want.size(); ++p) {
      float scale = 0.0f;
      for (float w : want[p]) scale = std::max(scale, std::abs(w));
      for (std::size_t i = 0; i < want[p].size(); ++i) {
        ASSERT_NEAR(got[p][i], want[p][i], 1e-6f * scale) << "stage " << s << " param " << p;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, c.chunks);
}

// Every rank ends the step with the whole job's timeline: each device's compute
// ops, both ends of every transfer, on one clock (a payload never lands before
// it left).
TEST_P(MpiRuntime, EveryRankHoldsTheWholeTimeline) {
  const Case c = GetParam();
  const Training mpi = train(c, std::make_shared<MpiTransport>());
  const Timeline& t = mpi.last;
  const int K = MpiSession::size();
  ASSERT_EQ(static_cast<int>(t.device_names.size()), K);
  EXPECT_EQ(t.device_names[1].rfind("device 1 (rank 1 on ", 0), 0u) << t.device_names[1];
  std::vector<std::size_t> compute(static_cast<std::size_t>(K), 0);
  std::map<std::uint64_t, const TimelineEvent*> sends;
  std::vector<const TimelineEvent*> recvs;
  for (const TimelineEvent& e : t.events) {
    if (e.lane == Lane::kCompute) ++compute[static_cast<std::size_t>(e.device)];
    if (e.lane == Lane::kSend) sends[*e.flow] = &e;
    if (e.lane == Lane::kRecv) recvs.push_back(&e);
  }
  for (int d = 0; d < K; ++d) {
    EXPECT_EQ(compute[static_cast<std::size_t>(d)],
              mpi.schedule.device_ops[static_cast<std::size_t>(d)].size())
        << "device " << d;
  }
  const std::size_t boundaries = static_cast<std::size_t>(K * c.chunks - 1);
  EXPECT_EQ(recvs.size(), 2 * boundaries * static_cast<std::size_t>(c.M));
  EXPECT_EQ(sends.size(), recvs.size());
  for (const TimelineEvent* r : recvs) {
    ASSERT_TRUE(sends.count(*r->flow)) << "flow " << *r->flow;
    EXPECT_GE(r->end, sends[*r->flow]->start) << "flow " << *r->flow;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, MpiRuntime,
                         ::testing::Values(Case{ScheduleKind::kGpipe, 4, Remat::kAlways},
                                           Case{ScheduleKind::kGpipe, 2, Remat::kNever},
                                           Case{ScheduleKind::k1F1B, 4, Remat::kExceptLast},
                                           Case{ScheduleKind::kZbH1, 4, Remat::kNever},
                                           Case{ScheduleKind::kInterleaved1F1B, 4, Remat::kAlways,
                                                2}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           const Case& c = param.param;
                           std::string name = std::string(to_string(c.schedule)) + "M" +
                                              std::to_string(c.M) + std::string(to_string(c.remat));
                           name.erase(std::remove_if(name.begin(), name.end(),
                                                     [](char ch) { return !std::isalnum(ch); }),
                                      name.end());
                           return name;
                         });

TEST(MpiTransport, RefusesAJobOfTheWrongSize) {
  MpiTransport t;
  EXPECT_EQ(t.local_devices(MpiSession::size()), std::vector<int>{MpiSession::rank()});
  try {
    t.local_devices(MpiSession::size() + 1);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("start it with mpirun -np " +
                                         std::to_string(MpiSession::size() + 1)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipescope::exec

int main(int argc, char** argv) {
  pipescope::exec::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int failed = RUN_ALL_TESTS();
  // The job fails when any rank failed.
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
