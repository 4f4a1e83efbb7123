// The profiler's rounds: which are kept, and the layer figures taken from them.
#include "exec/profile_rounds.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "costmodels/profile.h"
#include "exec/machine_speed.h"
#include "exec/profiler.h"
#include "exec/timing.h"

namespace pipescope::exec {

double round_disturbance(double other_work, const std::vector<double>& slowdowns) {
  const bool plausible = std::all_of(slowdowns.begin(), slowdowns.end(), plausible_slowdown);
  return plausible ? other_work : 1.0;
}

std::vector<std::size_t> kept_rounds(const std::vector<double>& other_work) {
  std::vector<std::size_t> out;
  for (std::size_t r = 0; r < other_work.size(); ++r) {
    if (other_work[r] <= kDiscardOtherWorkAbove) out.push_back(r);
  }
  if (!out.empty()) return out;
  for (std::size_t r = 0; r < other_work.size(); ++r) out.push_back(r);
  // The least disturbed half, the earlier round first among equals.
  std::stable_sort(out.begin(), out.end(),
                   [&](std::size_t a, std::size_t b) { return other_work[a] < other_work[b]; });
  out.resize((out.size() + 1) / 2);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Every slowdown a round measured, at every size.
std::vector<double> slowdowns(const ProfileRound& round) {
  std::vector<double> out;
  for (const SizeRound& size : round.sizes) {
    for (const std::optional<double>& f : size.slowdown) {
      if (f) out.push_back(*f);
    }
    if (size.op_list_slowdown) out.push_back(*size.op_list_slowdown);
  }
  return out;
}

}  // namespace

double disturbance(const ProfileRound& round) {
  return speed_checked_disturbance(round_disturbance(round.clocks.other_work(), slowdowns(round)),
                                   round.speed_spread);
}

SimTime layer_figure(std::size_t rounds, const std::vector<std::size_t>& layers,
                     const std::function<SimTime(std::size_t, std::size_t)>& time) {
  if (layers.empty() || rounds == 0) throw std::logic_error("finish() before any measure_pass()");
  double sum = 0.0;
  for (const std::size_t l : layers) {
    std::vector<SimTime> t;
    for (std::size_t r = 0; r < rounds; ++r) t.push_back(time(r, l));
    sum += static_cast<double>(median(t));
  }
  return static_cast<SimTime>(std::llround(sum / static_cast<double>(layers.size())));
}

std::optional<SimTime> op_list_figure(const std::vector<const ProfileRound*>& kept, std::size_t i,
                                      std::initializer_list<KindTimes OpListTimes::*> kinds,
                                      const std::vector<std::size_t>& ls) {
  const auto size = [&](std::size_t r) -> const SizeRound& { return kept[r]->sizes[i]; };
  for (std::size_t r = 0; r < kept.size(); ++r) {
    if (!size(r).op_lists) return std::nullopt;
    for (const std::size_t l : ls) {
      int n = 0;
      for (const auto k : kinds) n += ((*size(r).op_lists).*k).count[l];
      if (n == 0) return std::nullopt;
    }
  }
  return layer_figure(kept.size(), ls, [&](std::size_t r, std::size_t l) {
    SimTime sum = 0;
    int n = 0;
    for (const auto k : kinds) {
      sum += ((*size(r).op_lists).*k).sum[l];
      n += ((*size(r).op_lists).*k).count[l];
    }
    return sum / n;
  });
}

std::vector<const OpTimes*> whole_model_passes(const std::vector<ProfileRound>& rounds,
                                               const std::vector<const ProfileRound*>& kept,
                                               std::size_t i) {
  std::vector<const OpTimes*> passes;
  for (const ProfileRound* r : kept) {
    if (r->sizes[i].alone) passes.push_back(&*r->sizes[i].alone);
  }
  for (std::size_t r = 0; passes.empty() && r < rounds.size(); ++r) {
    if (rounds[r].sizes[i].alone) passes.push_back(&*rounds[r].sizes[i].alone);
  }
  return passes;
}

}  // namespace pipescope::exec
