#pragma once
// The profiler's rounds (profiler.h): what one round measured at each
// micro-batch size, how disturbed a round was, and the layer figures taken
// from the rounds kept.

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <optional>
#include <vector>

#include "costmodels/units.h"
#include "exec/op_list_profile.h"
#include "exec/profile_passes.h"

namespace pipescope::exec {

// One micro-batch size's measurements in one round.
struct SizeRound {
  // One thread running the whole model, as a one-stage plan does. With a plan
  // only in the first round and where the even ranges need it: the kinds of op
  // the plan does not run take their figures from it.
  std::optional<OpTimes> alone;
  // [n - 2]: every op's time summed with n threads each running its range of
  // the layers (even_ranges) at once, over alone's sum (n from 2 to
  // ModelProfiler::State::generic_most; the plan's device count excepted
  // when its op lists measured it).
  std::vector<std::optional<double>> slowdown;
  // With a plan: its devices' op lists, each alone (op_lists_alone), and their
  // time all at once over that (op_lists_together; with 2 or more devices,
  // each on a core of its own).
  std::optional<OpListTimes> op_lists;
  std::optional<double> op_list_slowdown;
};

struct ProfileRound {
  std::vector<SizeRound> sizes;
  PassClocks clocks;  // every timed op of the round, on every thread
  // How far the cores' speed moved between the checks before and after the
  // round (speed_spread, machine_speed.h); 0 where it was not checked
  // (ProfileOptions::check_speed).
  double speed_spread = 0.0;
};

// How disturbed `round` was (round_disturbance): the share of its wall time
// other work took, or 1 when a slowdown it measured is implausible; more than
// either when the cores' speed moved over it (speed_checked_disturbance).
double disturbance(const ProfileRound& round);

// The figure for one kind of layer: the median of each layer's timings over the
// kept rounds (robust to a round that the OS interrupted), then the mean over
// the layers of that kind. The layers of one shape do not all take the same
// time, and consistently so (the first block's stash is the coldest by the time
// its backward reads it): the mean keeps their sum, which a median over the
// pooled timings would put too low. time(r, l) is round r's time of layer l.
SimTime layer_figure(std::size_t rounds, const std::vector<std::size_t>& layers,
                     const std::function<SimTime(std::size_t, std::size_t)>& time);

// The figure of what the kept rounds' op lists at size i ran of `kinds` at
// the layers `ls` (a forward that keeps its stash and a recompute are one
// figure), or nullopt where they ran none at one of the layers.
std::optional<SimTime> op_list_figure(const std::vector<const ProfileRound*>& kept, std::size_t i,
                                      std::initializer_list<KindTimes OpListTimes::*> kinds,
                                      const std::vector<std::size_t>& ls);

// The passes over the whole model that size i's figures come from: those of
// the kept rounds that ran one, or when none did (with a plan, only the first
// round may), those of every round that did.
std::vector<const OpTimes*> whole_model_passes(const std::vector<ProfileRound>& rounds,
                                               const std::vector<const ProfileRound*>& kept,
                                               std::size_t i);

}  // namespace pipescope::exec
