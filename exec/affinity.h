#pragma once
// Where the CPU executor's threads run.
//
// A device of the `cpu` preset is a core. Left to the OS, two stage threads that
// hand each other payloads drift onto one core: the scheduler wakes a receiver
// next to the sender that woke it (its caches are warm there) and moves it back
// only when it balances load, milliseconds later. Meanwhile the two threads
// time-share one core while the other idles, which measured up to 7 % of the
// ops' wall time taken from them and steps 10 % longer than their ops on this
// 2-core machine. Pinning each device's thread to a core of its own, as the
// simulator assumes, removes that.

#include <vector>

namespace pipescope::exec {

// The CPUs the calling thread may run on (sched_getaffinity), ascending: the
// process's, for a thread nobody pinned. Empty where the system cannot say
// (then nothing is pinned).
std::vector<int> allowed_cpus();

// Binds the calling thread to `cpu`. Returns false (and leaves the thread as it
// was) when the system refuses.
bool pin_current_thread(int cpu);

// The CPU the calling thread runs on now, or -1 where the system cannot say.
int current_cpu();

// The CPU for each of `threads` threads, one core each: allowed_cpus()[i], or
// empty (do not pin) when there are more threads than allowed CPUs, since then
// they share cores and the OS time-slices them.
std::vector<int> cpus_for_threads(int threads);

// The CPU for each of `threads` threads that come in groups of `group`
// consecutive ones (a stage's ranks, which exchange with each other within
// its ops): cpus_for_threads(threads) when they fit; otherwise, when a group
// fits (2 <= group <= the allowed CPUs), thread i on allowed_cpus()[i mod
// their count], so that no two threads of a group share a core. Else empty.
std::vector<int> cpus_for_groups(int threads, int group);

// The CPU of thread or process `i` of those that time-slice `cpus` between
// them, spread evenly: cpus[i mod their count]; -1 (do not pin) for no CPUs
// or i < 0.
int spread_cpu(const std::vector<int>& cpus, int i);

// The CPUs for the `threads` worker threads a process runs in a step, each
// of its devices' `group` ranks (cpus_for_groups), where it holds
// `local_devices` of the plan's `devices` and `group` of each device's
// `ranks`; empty (do not pin) for one thread of a plan that other processes
// share, which stays where mpirun bound its process. One thread of a plan
// run whole here goes on the first allowed CPU, where the profiler measures
// a one-device plan's ops. (Pinned, the one thread of each of a one-device
// plan's rank processes would all share that first CPU where mpirun binds
// none of them, oversubscribed.)
std::vector<int> step_worker_cpus(int threads, int group, int local_devices, int devices,
                                  int ranks);

}  // namespace pipescope::exec
