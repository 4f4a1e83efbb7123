#include "exec/affinity.h"

#include <sched.h>

#include <pthread.h>

namespace pipescope::exec {

std::vector<int> allowed_cpus() {
  std::vector<int> out;
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
#endif
  return out;
}

bool pin_current_thread(int cpu) {
#ifdef __linux__
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
#else
  (void)cpu;
  return false;
#endif
}

int current_cpu() {
#ifdef __linux__
  return sched_getcpu();
#else
  return -1;
#endif
}

std::vector<int> cpus_for_threads(int threads) {
  std::vector<int> cpus = allowed_cpus();
  if (threads < 1 || static_cast<int>(cpus.size()) < threads) return {};
  cpus.resize(static_cast<std::size_t>(threads));
  return cpus;
}

int spread_cpu(const std::vector<int>& cpus, int i) {
  if (cpus.empty() || i < 0) return -1;
  return cpus[static_cast<std::size_t>(i) % cpus.size()];
}

std::vector<int> cpus_for_groups(int threads, int group) {
  std::vector<int> fit = cpus_for_threads(threads);
  if (!fit.empty()) return fit;
  const std::vector<int> cpus = allowed_cpus();
  const int n = static_cast<int>(cpus.size());
  if (threads < 1 || group < 2 || group > n) return {};
  std::vector<int> out;
  out.reserve(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) out.push_back(spread_cpu(cpus, i));
  return out;
}

std::vector<int> step_worker_cpus(int threads, int group, int local_devices, int devices,
                                  int ranks) {
  const bool whole_plan_here = local_devices == devices && group == ranks;
  if (threads < 2 && !whole_plan_here) return {};
  return cpus_for_groups(threads, group);
}

}  // namespace pipescope::exec
