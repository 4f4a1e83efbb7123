#include "exec/expert_load_profile.h"

#include <algorithm>
#include <stdexcept>

#include "exec/data.h"
#include "exec/expert_shard.h"
#include "exec/profile_passes.h"
#include "exec/timing.h"

namespace pipescope::exec {

namespace {

// The time a further row takes in the calls of one direction (a forward's or
// a backward's), every rank's: the slope of the least-squares line through
// their (rows, wall) points, as a call also pays what does not grow with its
// rows (the gather, the scatter, a product's start). Without spread in the
// rows, their mean time a row; never below 0.
double row_time_s(const std::vector<std::vector<ExpertTally::Call>>& calls, bool backward) {
  double n = 0.0, sr = 0.0, sw = 0.0, srr = 0.0, srw = 0.0;
  for (const auto& rank : calls) {
    for (const ExpertTally::Call& c : rank) {
      if (c.backward != backward) continue;
      const double r = static_cast<double>(c.rows), w = static_cast<double>(c.wall) * 1e-9;
      n += 1.0;
      sr += r;
      sw += w;
      srr += r * r;
      srw += r * w;
    }
  }
  if (n == 0.0 || sr <= 0.0) return 0.0;
  const double spread = n * srr - sr * sr;
  if (spread <= 1e-9 * srr * n) return sw / sr;
  return std::max(0.0, (n * srw - sr * sw) / spread);
}

// The busiest rank's extra time summed over one rank's mixture calls of a
// pass (`calls`), from the figures' mean extra a forward and a backward.
double load_waits_s(const ExpertLoadFigures& f, const std::vector<ExpertTally::Call>& calls) {
  double s = 0.0;
  for (const ExpertTally::Call& c : calls) s += c.backward ? f.backward_s : f.forward_s;
  return s;
}

}  // namespace

ExpertLoadFigures expert_load_of(const std::vector<std::vector<ExpertTally::Call>>& calls) {
  if (calls.size() < 2) throw std::invalid_argument("an expert load needs 2 or more ranks");
  const std::vector<ExpertTally::Call>& first = calls.front();
  for (const auto& rank : calls) {
    bool same = rank.size() == first.size();
    for (std::size_t i = 0; same && i < rank.size(); ++i) {
      same = rank[i].backward == first[i].backward;
    }
    if (!same) throw std::invalid_argument("the expert ranks' mixture calls do not pair up");
  }
  const double rate[2] = {row_time_s(calls, false), row_time_s(calls, true)};
  ExpertLoadFigures f;
  f.ranks = static_cast<int>(calls.size());
  double extra[2] = {0.0, 0.0}, imbalance = 0.0;
  int count[2] = {0, 0};
  for (std::size_t i = 0; i < first.size(); ++i) {
    double rows = 0.0, busiest = 0.0;
    for (const auto& rank : calls) {
      rows += static_cast<double>(rank[i].rows);
      busiest = std::max(busiest, static_cast<double>(rank[i].rows));
    }
    const double mean = rows / static_cast<double>(calls.size());
    const int b = first[i].backward ? 1 : 0;
    extra[b] += (busiest - mean) * rate[b];
    ++count[b];
    if (b == 0) imbalance += mean > 0.0 ? busiest / mean : 1.0;
  }
  if (count[0] > 0) {
    f.forward_s = extra[0] / count[0];
    f.imbalance = imbalance / count[0];
  }
  if (count[1] > 0) f.backward_s = extra[1] / count[1];
  return f;
}

namespace {

// Throws std::invalid_argument unless `model` is one expert rank of a
// transformer at T = C = 1 and passes >= 1.
void check_expert_model(const ModelSpec& model, int passes) {
  if (model.transformer == nullptr || model.expert_parallel < 2 || model.tensor_parallel != 1 ||
      model.context_parallel != 1) {
    throw std::invalid_argument(
        "the expert ranks' load is timed for a transformer split over expert ranks alone");
  }
  if (passes < 1) throw std::invalid_argument("timing the expert load needs 1 or more passes");
}

}  // namespace

std::vector<GroupRun> expert_rank_passes(LayerList& layers, const ModelSpec& model, int e,
                                         std::int64_t batch, std::uint64_t seed, int passes,
                                         CollectiveTally& group) {
  check_expert_model(model, passes);
  const int E = model.expert_parallel;
  const TaskShape task = task_shape(model);
  std::vector<GroupRun> out;
  for (int p = 0; p <= passes; ++p) {
    // As run_plan makes a step's micro-batches (E times a rank's samples)
    // and StepRun::share_micro_batches cuts them: rank e's samples, the
    // loss scaled by the whole micro-batch's tokens.
    const MicroBatch whole =
        whole_batch(task, static_cast<int>(batch) * E, static_cast<std::uint64_t>(p), seed);
    const MicroBatch mine = samples_of(whole, e, E);
    const Context ctx = share_context(mine, 0, 1, std::int64_t{whole.batch} * whole.seq);
    ExpertTally tally;
    const ExpertScope experts(tally);
    const ShareExchanges pass = timed_forward_and_backward(layers, mine, ctx, group);
    ExchangeTimes both = pass.forward;
    both += pass.backward;
    out.push_back(
        {std::move(tally.calls), both, {pass.forward_compute(), pass.backward_compute()}});
  }
  return out;
}

ExpertLoadTiming expert_load_timing(const std::vector<std::vector<GroupRun>>& ranks,
                                    std::int64_t batch, std::size_t warm_ups) {
  if (ranks.size() < 2) throw std::invalid_argument("an expert load needs 2 or more ranks");
  const std::size_t passes = ranks.front().size();
  for (const std::vector<GroupRun>& r : ranks) {
    if (r.size() != passes || passes <= warm_ups) {
      throw std::invalid_argument("the expert ranks' passes do not pair up");
    }
  }
  std::vector<ExpertLoadTiming> kept;
  const auto n = static_cast<SimTime>(ranks.size());
  for (std::size_t p = warm_ups; p < passes; ++p) {
    std::vector<std::vector<ExpertTally::Call>> calls;
    ExpertLoadTiming t;
    for (const std::vector<GroupRun>& r : ranks) {
      calls.push_back(r[p].calls);
      t.alltoalls += r[p].exchanges;
      t.forward_compute += r[p].compute[0];
      t.backward_compute += r[p].compute[1];
    }
    t.forward_compute /= n;
    t.backward_compute /= n;
    t.load = expert_load_of(calls);
    t.load_waits_s = static_cast<double>(ranks.size()) * load_waits_s(t.load, calls.front());
    kept.push_back(t);
  }
  // The pass of the median extra time, and apart from it the pass of the
  // median all-to-all beyond the waits for the busiest: a pass in which
  // other work took a core is left out of either (a balanced router's
  // passes all take nothing extra, and would not tell).
  const auto median_by = [&kept](auto key) {
    std::vector<ExpertLoadTiming> v = kept;
    std::sort(v.begin(), v.end(), [&key](const ExpertLoadTiming& a, const ExpertLoadTiming& b) {
      return key(a) < key(b);
    });
    return v[v.size() / 2];
  };
  ExpertLoadTiming out =
      median_by([](const ExpertLoadTiming& t) { return t.load.forward_s + t.load.backward_s; });
  const ExpertLoadTiming exchanges = median_by([](const ExpertLoadTiming& t) {
    return static_cast<double>(t.alltoalls.wall) * 1e-9 - t.load_waits_s;
  });
  out.alltoalls = exchanges.alltoalls;
  out.load_waits_s = exchanges.load_waits_s;
  // Each direction's compute, the median over the passes apart.
  std::vector<SimTime> forward, backward;
  for (const ExpertLoadTiming& t : kept) {
    forward.push_back(t.forward_compute);
    backward.push_back(t.backward_compute);
  }
  out.forward_compute = median(forward);
  out.backward_compute = median(backward);
  out.load.micro_batch = batch;
  return out;
}

namespace {

// The ranks' load and their all-to-all in the step (in_step_alltoall).
void write_load_and_alltoall(Profile& profile, int E, const ExpertLoadTiming& t, std::int64_t batch,
                             const TransportFigures& bare) {
  profile.expert_load = t.load;
  profile.alltoall_group = in_step_alltoall(bare, E, t.alltoalls, t.load_waits_s, batch, true);
}

}  // namespace

void write_expert_figures(Profile& profile, const ModelSpec& model, const ExpertLoadTiming& t,
                          std::int64_t batch, const TransportFigures& bare) {
  const int E = model.expert_parallel;
  write_load_and_alltoall(profile, E, t, batch, bare);
  keep_group_slowdown(profile, group_compute_slowdown(profile, model, E, t.forward_compute,
                                                      t.backward_compute, batch, true));
}

ExpertLoadTiming time_expert_load(const ModelSpec& model, std::int64_t batch, std::uint64_t seed,
                                  int passes) {
  check_expert_model(model, passes);
  const int E = model.expert_parallel;
  std::vector<LayerList> layers = build_expert_ranks(*model.transformer, seed, E);
  std::vector<std::vector<GroupRun>> ranks(static_cast<std::size_t>(E));
  on_group_threads(E, [&](int e, CollectiveTally& group) {
    const auto r = static_cast<std::size_t>(e);
    ranks[r] = expert_rank_passes(layers[r], model, e, batch, seed, passes, group);
  });
  return expert_load_timing(ranks, batch);
}

void write_expert_plan_figures(Profile& profile, const ModelSpec& model,
                               const PairedGroupRuns& pairs,
                               const std::vector<std::vector<GroupRun>>& apart, std::int64_t batch,
                               const TransportFigures& bare) {
  const int E = model.expert_parallel;
  const GroupSlowdownFigures slowdown = paired_slowdown(pairs, E, batch, true);
  ExpertLoadTiming t = expert_load_timing(pairs.ranks, batch, 0);
  if (!apart.empty()) {
    const ExpertLoadTiming a = expert_load_timing(apart, batch, 0);
    t.load = a.load;
    t.alltoalls = a.alltoalls;
    t.load_waits_s = a.load_waits_s;
  }
  write_load_and_alltoall(profile, E, t, batch, bare);
  keep_group_slowdown(profile, slowdown);
}

}  // namespace pipescope::exec
