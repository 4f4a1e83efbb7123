#include "exec/shared_cores_note.h"

#include <algorithm>
#include <cstdio>

namespace pipescope::exec {

namespace {

// How long a time-sliced group's ops were predicted against alone: `ranks`
// over `cores` (`cores_named`), or as the profile measured them (`sliced`;
// `all_stages`: every stage's processes at once, as the MPI profile runs
// them).
std::string sliced_stretch(int ranks, int cores, const std::string& cores_named,
                           const GroupSlowdownFigures* sliced, bool all_stages) {
  char stretch[64];
  if (sliced == nullptr) {
    std::snprintf(stretch, sizeof stretch, "%.3g", static_cast<double>(ranks) / std::max(1, cores));
    return std::string(stretch) + " times as long as alone (time-sliced on the " + cores_named +
           ")";
  }
  std::snprintf(stretch, sizeof stretch, "%.3g (forwards) and %.3g (backwards)", sliced->forward,
                sliced->backward);
  if (all_stages) {
    return std::string(stretch) + " times as long as alone (as the profile measured them " +
           "time-sliced on the " + cores_named +
           " with every stage's processes at once, over how many stages ran at once; their " +
           "exchanges and their waits behind the other stages' processes in them)";
  }
  return std::string(stretch) + " times as long as alone (as the profile measured them " +
         "time-sliced on the " + cores_named + ", their exchanges in them)";
}

}  // namespace

std::string shared_cores_note(int stages, int cores, const std::string& what, int ranks,
                              bool processes, const GroupSlowdownFigures* sliced) {
  const std::string many = what + "s";
  const std::string runners = processes ? "processes" : "threads";
  const std::string who = what == "GPU" ? "each GPU interleaves the streams' kernels"
                                        : "the OS time-slices the " + runners;
  const auto count = [&](int n) { return std::to_string(n) + " " + (n == 1 ? what : many); };
  // The MPI profile times a time-sliced group with every stage's processes.
  const bool all_stages = processes && sliced != nullptr && stages > 1;
  const std::string pool =
      ranks > cores ? "each stage's " + std::to_string(ranks) + " ranks' ops " +
                          sliced_stretch(ranks, cores, count(cores), sliced, all_stages)
      : ranks > 1 ? "a pool of " + count(std::max(1, cores / ranks)) + " for each rank's stages"
                  : "a pool of that many " + many;
  const std::string holding = ranks > cores ? ", one stage's ops at a time"
                                            : ", each op holding one for its whole duration";
  return std::to_string(stages) + " stages" +
         (ranks > 1 ? " of " + std::to_string(ranks) + " ranks each (" +
                          std::to_string(stages * ranks) + " " + runners + ")"
                    : "") +
         " share " + count(cores) + ": predicted with " + pool + holding +
         " and ops served in the order they became ready (" + who +
         " instead, so the order, not the total work, is approximate" +
         (ranks > 1 && !all_stages ? "; a rank's exchanges also wait while its partners' " + many +
                                         " run their other stages, which the prediction leaves out"
                                   : "") +
         ")";
}

}  // namespace pipescope::exec
