#include "exec/group_op_lists.h"

#include <stdexcept>
#include <utility>

#include "exec/data.h"
#include "exec/expert_shard.h"
#include "exec/profile_passes.h"
#include "exec/tensor_shard.h"
#include "exec/timing.h"

namespace pipescope::exec {

namespace {

// The ranks of the group `model` is one of: its E x C expert ranks' shares.
int group_ranks(const ModelSpec& model) {
  return model.context_parallel * model.expert_parallel;
}

// Rank g's part of the micro-batch of run r, as a step cuts it
// (StepRun::share_micro_batches): of E batch sequences, expert rank g / C's
// samples, of each of them share g % C's rows; the loss scaled by the whole
// micro-batch's tokens.
struct RankBatch {
  MicroBatch mine;
  std::int64_t tokens = 0;  // of the whole micro-batch
};
RankBatch rank_batch(const ModelSpec& model, int g, std::int64_t batch, int r, std::uint64_t seed) {
  const int C = model.context_parallel, E = model.expert_parallel;
  const MicroBatch whole = whole_batch(task_shape(model), static_cast<int>(batch) * E,
                                       static_cast<std::uint64_t>(r), seed);
  const std::int64_t tokens = std::int64_t{whole.batch} * whole.seq;
  return {share_of(samples_of(whole, g / C, E), g % C, C), tokens};
}

std::vector<LayerList> group_layers(const ModelSpec& model, std::uint64_t seed) {
  const TransformerParams& p = *model.transformer;
  const int C = model.context_parallel, E = model.expert_parallel;
  if (E > 1) return build_expert_ranks(p, seed, E, nullptr, C, model.context_by_heads);
  return build_context_ranks(p, seed, 1, C, nullptr, model.context_by_heads);
}

}  // namespace

void check_group_model(const ModelSpec& model, int runs) {
  if (model.transformer == nullptr || model.tensor_parallel != 1 || group_ranks(model) < 2) {
    throw std::invalid_argument(
        "a plan's op lists are run by the context shares or the expert ranks (or both) of a "
        "transformer alone");
  }
  if (runs < 1) throw std::invalid_argument("running the op lists needs 1 or more runs");
}

std::vector<GroupRun> group_device_runs(LayerList& layers, const ModelSpec& model,
                                        const GroupPlanRuns& r, int d, int g,
                                        CollectiveTally& tally) {
  check_group_model(model, r.runs);
  const int C = model.context_parallel;
  // A crowded group's ops on the wall clock, their exchanges' waits in them.
  const OpClock clock = r.crowded ? OpClock{false, 0} : r.clock;
  const CollectiveTally* less = r.crowded ? nullptr : &tally;
  std::vector<GroupRun> out;
  for (int run = 1; run <= r.runs; ++run) {
    const RankBatch b = rank_batch(model, g, r.batch, run, r.seed);
    const Context ctx = share_context(b.mine, g % C, C, b.tokens);
    std::vector<Tensor> in = r.inputs;
    in.at(0) = b.mine.input;
    run_op_list(layers, r.plan, d, in, ctx, r.seed, clock, nullptr, nullptr, less);
    tally.reset();
    OpListTimes times(layers.size());
    ExpertTally experts;
    {
      const ExpertScope scope(experts);
      run_op_list(layers, r.plan, d, in, ctx, r.seed, clock, &times, nullptr, less);
    }
    out.push_back({std::move(experts.calls),
                   ExchangeTimes{tally.count, tally.wall, tally.bytes},
                   {times.forward_total(), times.backward_total()}});
  }
  return out;
}

std::vector<std::vector<GroupRun>> runs_over_devices(
    const std::vector<std::vector<GroupRun>>& by_device, int G) {
  const std::size_t runs = by_device.empty() ? 0 : by_device.front().size();
  const auto K = static_cast<int>(by_device.size()) / G;
  std::vector<std::vector<GroupRun>> out(static_cast<std::size_t>(G), std::vector<GroupRun>(runs));
  for (int g = 0; g < G; ++g) {
    for (int d = 0; d < K; ++d) {
      const std::vector<GroupRun>& mine = by_device.at(static_cast<std::size_t>(d * G + g));
      for (std::size_t i = 0; i < runs; ++i) {
        GroupRun& to = out[static_cast<std::size_t>(g)][i];
        to.calls.insert(to.calls.end(), mine.at(i).calls.begin(), mine.at(i).calls.end());
        to.exchanges += mine[i].exchanges;
        to.compute[0] += mine[i].compute[0];
        to.compute[1] += mine[i].compute[1];
      }
    }
  }
  return out;
}

std::vector<std::vector<GroupRun>> group_op_list_runs(const ModelSpec& model,
                                                      const GroupPlanRuns& r, bool together) {
  check_group_model(model, r.runs);
  const int G = group_ranks(model);
  const int K = r.plan.schedule.devices();
  std::vector<LayerList> layers = group_layers(model, r.seed);
  // [device * G + rank], as a step's workers: every device's ranks at once,
  // each device's G on cores of their own where the threads outnumber them;
  // or one device's G after another's.
  std::vector<std::vector<GroupRun>> threads(static_cast<std::size_t>(K * G));
  const auto device = [&](int d, int g, CollectiveTally& tally) {
    threads[static_cast<std::size_t>(d * G + g)] =
        group_device_runs(layers[static_cast<std::size_t>(g)], model, r, d, g, tally);
  };
  if (together && !r.crowded) {
    on_group_threads(
        K * G, [&](int i, CollectiveTally& tally) { device(i / G, i % G, tally); }, G);
  } else {
    for (int d = 0; d < K; ++d) {
      on_group_threads(G, [&](int g, CollectiveTally& tally) { device(d, g, tally); });
    }
  }
  return runs_over_devices(threads, G);
}

ComputeRatio group_over_alone(const std::vector<std::vector<GroupRun>>& ranks, std::size_t run,
                              const std::array<SimTime, 2>& alone) {
  if (ranks.empty()) return {};
  double forward = 0.0, backward = 0.0;
  for (const std::vector<GroupRun>& rank : ranks) {
    forward += static_cast<double>(rank.at(run).compute[0]);
    backward += static_cast<double>(rank.at(run).compute[1]);
  }
  const auto n = static_cast<double>(ranks.size());
  const auto f = static_cast<double>(alone[0]);
  const auto b = static_cast<double>(alone[1]);
  if (!(f > 0.0 && b > 0.0 && forward > 0.0 && backward > 0.0)) return {};
  return {forward / n / f, backward / n / b};
}

PairedGroupRuns paired_group_runs(const ModelSpec& model, const GroupPlanRuns& r,
                                  const std::function<OpListTimes()>& alone) {
  check_group_model(model, r.runs);
  PairedGroupRuns out;
  out.ranks.resize(static_cast<std::size_t>(group_ranks(model)));
  const GroupPlanRuns one{r.plan, r.batch, r.seed, r.inputs, r.clock, 1, r.crowded};
  for (int i = 0; i < r.runs; ++i) {
    const OpListTimes a = alone();
    std::vector<std::vector<GroupRun>> ranks = group_op_list_runs(model, one);
    const ComputeRatio ratio = group_over_alone(ranks, 0, a);
    if (ratio.forward > 0.0) out.ratios.push_back(ratio);
    for (std::size_t g = 0; g < ranks.size(); ++g) {
      out.ranks[g].push_back(std::move(ranks[g].front()));
    }
  }
  return out;
}

GroupSlowdownFigures paired_slowdown(const PairedGroupRuns& pairs, int ranks, std::int64_t batch,
                                     bool experts, int shares, bool time_sliced) {
  if (ranks < 2 || pairs.ratios.empty()) return {};
  std::vector<double> forward, backward;
  for (const ComputeRatio& r : pairs.ratios) {
    forward.push_back(r.forward);
    backward.push_back(r.backward);
  }
  return {ranks, median(forward), median(backward), batch, experts, true, time_sliced, shares};
}

}  // namespace pipescope::exec
