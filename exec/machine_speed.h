#pragma once
// Whether this machine kept its speed through a measurement.
//
// A virtual machine's core can run the same code at two speeds for seconds at
// a time while the hypervisor's other guests take turns on the physical core
// beneath it: on the 2-core machine of docs/executor.md the same product took
// 60-70 us for a while and 130-140 us for the next 8 s on one core while the
// other kept its speed, and whole steps of a plan took 27 ms or 39 ms as their
// cores went. No clock sees it (the thread runs the whole time, so neither the
// steal time nor the thread's CPU clock moves), yet a profile taken at one
// speed predicts a run at the other 30-45 % off. A fixed piece of work, timed
// on every core a run uses before the profile, after each of its passes and
// after each step, shows it: the slowest of a core's timings over its fastest.

#include <cstddef>
#include <vector>

namespace pipescope::exec {

// The reference work: the executor's own 192 x 192 x 192 fp32 product, the
// best of 5 timings after an untimed one (about half a millisecond a core on
// the machine of docs/executor.md).
inline constexpr int kReferenceProductSize = 192;
inline constexpr int kReferenceProductRepeats = 5;

// The reference work's time on each of the first `cores` CPUs the process
// may run on (all of them when it may run on fewer), seconds, in
// allowed_cpus() order: the CPUs a run of that many threads is pinned to
// (affinity.h). Each is timed by a thread pinned to its CPU while the others
// wait; the calling thread's own time where the system cannot say which
// CPUs there are.
std::vector<double> reference_times(int cores);

// How far the machine's speed moved over `checks` (each a reference_times()
// of the same cores): the largest over the cores of a core's slowest time
// over its fastest, minus one; 0 for a core timed once. Cores that differ
// from each other but keep their speed do not count: the profile measures
// each stage's ops on the core the stage runs on. Throws
// std::invalid_argument for a time that is not positive.
double speed_spread(const std::vector<std::vector<double>>& checks);

// Above this spread a measurement saw two speeds of the machine (a core's
// two speeds differed by 40 % or more on the machine of docs/executor.md).
inline constexpr double kDiscardSpeedSpreadAbove = 0.10;

// How far each step's speed was from the profile's. `checks` holds the
// profile's checks first (`profile_checks` of them: before it and after each
// of its passes), then one after each step, so that step i lies between
// checks[profile_checks - 1 + i] and checks[profile_checks + i]; its figure
// is the speed_spread of the profile's checks and those two together (never
// below the profile's own). Throws std::invalid_argument for no profile
// checks or more than there are checks.
std::vector<double> step_speed_spreads(const std::vector<std::vector<double>>& checks,
                                       std::size_t profile_checks);

// How disturbed a measurement was, for kept_rounds (profiler.h): the share of
// its wall time other work took, or when its speed spread is above
// kDiscardSpeedSpreadAbove, one plus the spread: a measurement taken at two
// speeds is discarded however little else ran, the least spread first.
double speed_checked_disturbance(double other_work, double spread);

}  // namespace pipescope::exec
