#include "exec/share_exchange_profile.h"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "exec/compute/tensor_group.h"
#include "exec/data.h"
#include "exec/profile_passes.h"
#include "exec/tensor_shard.h"
#include "exec/timing.h"
#include "exec/transport_profile.h"
#include "sim/base/format.h"

namespace pipescope::exec {

ShareExchanges timed_forward_and_backward(LayerList& layers, const MicroBatch& mine,
                                          const Context& ctx, CollectiveTally& tally) {
  const auto taken = [&tally] { return ExchangeTimes{tally.count, tally.wall, tally.bytes}; };
  ShareExchanges out;
  tally.reset();
  const auto start = Clock::now();
  auto forward_end = start;
  step_pass(
      layers, mine.input, ctx,
      [&] {
        out.forward = taken();
        out.forward_pass = elapsed(start);
        forward_end = Clock::now();
        tally.reset();
      },
      [&] {
        out.backward = taken();
        out.backward_pass = elapsed(forward_end);
      });
  return out;
}

namespace {

// Throws std::invalid_argument unless `model` is one share of a transformer
// at T = E = 1 and passes >= 1.
void check_share_model(const ModelSpec& model, int passes) {
  if (model.transformer == nullptr || model.context_parallel < 2 || model.tensor_parallel != 1 ||
      model.expert_parallel != 1) {
    throw std::invalid_argument(
        "the shares' exchanges are timed for a transformer split over context shares alone");
  }
  if (passes < 1) throw std::invalid_argument("timing the exchanges needs 1 or more passes");
}

}  // namespace

std::vector<ShareExchanges> share_passes(LayerList& layers, const ModelSpec& model, int c,
                                         std::int64_t batch, std::uint64_t seed, int passes,
                                         CollectiveTally& tally) {
  check_share_model(model, passes);
  const int C = model.context_parallel;
  const TaskShape task = task_shape(model);
  std::vector<ShareExchanges> out;
  for (int p = 0; p <= passes; ++p) {
    // As StepRun::share_micro_batches cuts a step's micro-batches: share c's
    // positions of each sequence, the loss scaled by all its tokens.
    const MicroBatch whole =
        whole_batch(task, static_cast<int>(batch), static_cast<std::uint64_t>(p), seed);
    const MicroBatch rows = share_of(whole, c, C);
    const Context ctx = share_context(rows, c, C, std::int64_t{whole.batch} * whole.seq);
    const ShareExchanges pass = timed_forward_and_backward(layers, rows, ctx, tally);
    if (p > 0) out.push_back(pass);  // the first pass warms up
  }
  return out;
}

ShareExchanges median_pass(std::vector<ShareExchanges> passes) {
  if (passes.empty()) throw std::invalid_argument("no passes of the shares' exchanges");
  // The pass of the median time in exchanges: a pass during which other work
  // took a core (the shares then wait for the one that lost it) is left out.
  const auto by_exchanges = [](const ShareExchanges& a, const ShareExchanges& b) {
    return a.forward.wall + a.backward.wall < b.forward.wall + b.backward.wall;
  };
  std::nth_element(passes.begin(), passes.begin() + static_cast<std::ptrdiff_t>(passes.size() / 2),
                   passes.end(), by_exchanges);
  ShareExchanges out = passes[passes.size() / 2];
  // Its compute, each direction's apart, the median of the passes' (that
  // pass is the median of its exchanges, not of its compute).
  std::vector<SimTime> forward, backward;
  for (const ShareExchanges& p : passes) {
    forward.push_back(p.forward_compute());
    backward.push_back(p.backward_compute());
  }
  out.forward_pass = out.forward.wall + median(forward);
  out.backward_pass = out.backward.wall + median(backward);
  return out;
}

ShareExchanges time_share_exchanges(const ModelSpec& model, std::int64_t batch, std::uint64_t seed,
                                    int passes) {
  check_share_model(model, passes);
  const int C = model.context_parallel;
  std::vector<LayerList> shares =
      build_context_ranks(*model.transformer, seed, 1, C, nullptr, model.context_by_heads);
  std::vector<ShareExchanges> last;  // the last share's passes
  on_group_threads(C, [&](int c, CollectiveTally& tally) {
    std::vector<ShareExchanges> mine =
        share_passes(shares[static_cast<std::size_t>(c)], model, c, batch, seed, passes, tally);
    if (c == C - 1) last = std::move(mine);
  });
  return median_pass(std::move(last));
}

GroupAllToAllFigures in_step_alltoall(const TransportFigures& bare, int ranks,
                                      const ExchangeTimes& in_step, double other_waits_s,
                                      std::int64_t batch, bool experts) {
  const double buffer = in_step.mean_bytes() * ranks / (ranks - 1);
  const double each =
      in_step.count > 0 ? (static_cast<double>(in_step.wall) * 1e-9 - other_waits_s) / in_step.count
                        : 0.0;
  return {experts, ranks, std::max(bare.latency_s, each - buffer / bare.bandwidth), bare.bandwidth,
          batch};
}

GroupSlowdownFigures group_compute_slowdown(const Profile& profile, const ModelSpec& model,
                                            int ranks, SimTime forward_ns, SimTime backward_ns,
                                            std::int64_t batch, bool experts) {
  double forward = 0.0;
  double backward = 0.0;
  for (const LayerSpec& layer : model.layers) {
    const LayerProfile* e = profile.find(layer);
    if (e == nullptr || e->recompute.empty() || e->backward.empty()) return {};
    forward += static_cast<double>(interpolate_time(e->batch_sizes, e->recompute, batch));
    backward += static_cast<double>(interpolate_time(e->batch_sizes, e->backward, batch));
  }
  const auto f = static_cast<double>(forward_ns), b = static_cast<double>(backward_ns);
  if (!(ranks > 1 && forward > 0.0 && backward > 0.0 && f > 0.0 && b > 0.0)) return {};
  return {ranks, f / forward, b / backward, batch, experts};
}

GroupSlowdownFigures share_compute_slowdown(const Profile& profile, const ModelSpec& model,
                                            const ShareExchanges& in_step, std::int64_t batch) {
  return group_compute_slowdown(profile, model, model.context_parallel, in_step.forward_compute(),
                                in_step.backward_compute(), batch, false);
}

void keep_group_slowdown(Profile& profile, const GroupSlowdownFigures& g) {
  if (g.ranks > 1 && plausible_slowdown(g.forward) && plausible_slowdown(g.backward)) {
    profile.group_slowdown = g;
  }
}

void write_context_figures(Profile& profile, const ModelSpec& model, const ShareExchanges& in_step,
                           std::int64_t batch, const std::function<TransportFigures()>& bare) {
  const int C = model.context_parallel;
  keep_group_slowdown(profile, share_compute_slowdown(profile, model, in_step, batch));
  if (!model.context_by_heads) {
    profile.context_ring = {C, in_step.forward.mean_s(), in_step.backward.mean_s(), batch};
    return;
  }
  ExchangeTimes all = in_step.forward;
  all += in_step.backward;
  profile.alltoall_group = in_step_alltoall(bare(), C, all, 0.0, batch);
}

double share_exchange_bytes(const ModelSpec& model, std::int64_t batch) {
  double share = 0.0;
  for (const LayerSpec& layer : model.layers) {
    share += static_cast<double>(layer.params) * kStateBytesPerParam +
             static_cast<double>(layer.stash_bytes) * static_cast<double>(batch);
  }
  return share * model.context_parallel * model.expert_parallel;
}

std::string share_exchanges_unfit(const ModelSpec& model, std::int64_t batch,
                                  const std::optional<HostMemory>& host, int processes) {
  const double need = share_exchange_bytes(model, batch) * std::max(1, processes);
  if (!host || need <= static_cast<double>(host->bytes)) return "";
  const bool experts = model.expert_parallel > 1;
  return "the " + std::to_string(experts ? model.expert_parallel : model.context_parallel) +
         (experts ? " expert ranks'" : " shares'") + " layers need " + format_bytes(need) +
         (processes > 1 ? " (" + std::to_string(processes) + " processes, each building all)"
                        : std::string()) +
         " at micro-batch " + std::to_string(batch) + ", " +
         format_bytes(static_cast<double>(host->bytes)) + " available (" + host->source + ")";
}

}  // namespace pipescope::exec
