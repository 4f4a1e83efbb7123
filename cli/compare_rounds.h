#pragma once
// The rounds of `pipescope compare`: each profiles the plan's model (or takes
// the given profile), runs the steps and compares them; which rounds are kept
// and which one is reported.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/compare_command.h"
#include "cli/gpu_stages.h"
#include "costmodels/model.h"
#include "costmodels/profile.h"
#include "exec/compare.h"
#include "sim/plan/plan.h"
#include "sim/scenario/scenario.h"

namespace pipescope::cli {

// What every round of `compare` uses.
struct CompareInputs {
  Plan plan;
  ModelSpec model;
  std::shared_ptr<const Profile> given;  // --profile
  std::string profile_label;             // how the report names the prediction's profile
  // A given profile that does not fit the model is refused before any step.
  std::optional<Scenario> given_scenario;
  // --backend cuda: every stage on a stream of a GPU, the profile on them too.
  std::optional<GpuStages> gpus;
  bool mpi = false;
};

// The rounds' comparisons (on rank 0; none on the others) and the profile of
// the last one (the given one with --profile).
struct Rounds {
  std::vector<exec::Comparison> comparisons;
  std::shared_ptr<const Profile> profile;
};

// Each round, without a given profile, first profiles the plan's model at its
// micro-batch size, then runs the steps: the profile sees the machine as the
// run does a moment later, and leaves the run's caches and cores alone while
// it is measured. A profiling round runs every device's op list twice alone
// and twice at once (exec/profiler.h), some four steps' work: a third as many
// rounds as measured steps (at least 3) keep the profile shorter than the run.
// On the cpu backend the speed of the cores the run uses is checked before
// the profile, after each of its passes and after each step
// (exec/machine_speed.h), and only the steps at the profile's speed are
// measured. With two rounds or more asked, a round that saw two speeds is
// run again, up to three times as many rounds as asked in all; one round
// asked is one round run (with --profile, whose speed is not known, only the
// checks around the steps are taken, and no round is run again). (The MPI
// ranks and the GPUs run the rounds asked: every rank must run as many.)
Rounds run_rounds(const CompareOptions& o, const CompareInputs& in, int rank);

// The rounds kept: those whose median step lost at most 5 % of its ops' wall
// time to other work and whose cores kept their speed, or when none did the
// least disturbed half, as the profile keeps its rounds (exec::kept_rounds).
// A busy machine's round measures the other processes as much as the plan.
std::vector<std::size_t> kept_rounds(const std::vector<exec::Comparison>& rounds);

// Of the kept rounds, the one with the median step-time error.
const exec::Comparison& median_round(const std::vector<exec::Comparison>& rounds);

}  // namespace pipescope::cli
