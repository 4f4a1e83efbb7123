#include "exec/transport_profile.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>

#include "exec/affinity.h"
#include "exec/channel.h"
#include "exec/compute/device.h"
#include "exec/compute/device_layers.h"
#include "exec/compute/tensor_group.h"
#include "exec/profile_passes.h"
#include "exec/timing.h"

namespace pipescope::exec {

namespace {

// Rank 0's median time of one all-reduce of `floats` values, the ranks
// reducing back to back `repeats` times after one untimed call.
double allreduce_s(int ranks, Eigen::Index floats, int repeats) {
  TensorGroup group(ranks);
  double first = 0.0;
  run_threads(ranks, [&](int rank) {
    Matrix m = Matrix::Zero(1, floats);
    const double s = median_call_s(repeats, [&] { group.all_reduce(rank, m); });
    if (rank == 0) first = s;
  });
  return first;
}

// Rank 0's median time of one all-to-all of `floats` values a rank, in
// `ranks` equal parts, back to back `repeats` times after one untimed call.
double alltoall_s(int ranks, Eigen::Index floats, int repeats) {
  TensorGroup group(ranks);
  double first = 0.0;
  run_threads(ranks, [&](int rank) {
    std::vector<Matrix> parts(static_cast<std::size_t>(ranks), Matrix::Zero(1, floats / ranks));
    const double s = median_call_s(repeats, [&] { group.all_to_all(rank, parts); });
    if (rank == 0) first = s;
  });
  return first;
}

}  // namespace

TransportFigures group_figures(int ranks, int repeats, const char* what,
                               const std::function<double(int, Eigen::Index, int)>& one_s,
                               Eigen::Index largest) {
  if (ranks < 2 || repeats < 1) {
    throw std::invalid_argument(std::string(what) + " needs 2 or more ranks and 1 or more repeats");
  }
  constexpr Eigen::Index kSizes[] = {256, 4096, 32768, 262144};
  std::vector<double> bytes;
  std::vector<double> seconds;
  const auto measure = [&](Eigen::Index floats, int times) {
    bytes.push_back(static_cast<double>(floats) * sizeof(float));
    seconds.push_back(one_s(ranks, floats, times));
  };
  for (const Eigen::Index floats : kSizes) measure(floats, repeats);
  // A larger size about as many values in all as the last one's repeats.
  const Eigen::Index last = kSizes[std::size(kSizes) - 1];
  if (largest > last) {
    measure(largest, std::max<int>(3, static_cast<int>(static_cast<double>(repeats) *
                                                       static_cast<double>(last) /
                                                       static_cast<double>(largest))));
  }
  return fit_transport(bytes, seconds);
}

TransportFigures profile_tensor_allreduce(int ranks, int repeats) {
  return group_figures(ranks, repeats, "an all-reduce", allreduce_s);
}

TransportFigures profile_group_alltoall(int ranks, int repeats) {
  return group_figures(ranks, repeats, "an all-to-all", alltoall_s);
}

TransportFigures profile_linked_alltoall(const std::shared_ptr<GroupLink>& link, int repeats) {
  const int ranks = link ? link->ranks() : 0;
  return group_figures(ranks, repeats, "an all-to-all", [&](int, Eigen::Index floats, int n) {
    TensorGroup group(link);
    std::vector<Matrix> parts(static_cast<std::size_t>(ranks), Matrix::Zero(1, floats / ranks));
    return median_call_s(n, [&] { group.all_to_all(link->rank(), parts); });
  });
}

TransportFigures profile_transport(int round_trips) {
  if (round_trips < 1) throw std::invalid_argument("round_trips must be at least 1");
  // Payload sizes in floats: 4 B to 4 MiB.
  const std::vector<Eigen::Index> sizes{1, 1024, 16 * 1024, 256 * 1024, 1024 * 1024};
  std::vector<double> bytes;
  std::vector<double> one_way_s;
  Channel ping;
  Channel pong;
  const std::atomic<bool> never{false};
  const auto forever = Clock::now() + std::chrono::hours(24);
  // Each side on a core of its own, as the runtime pins two stages' threads:
  // a payload then wakes a thread waiting on another core, as in a step (left
  // to the OS, the two threads share the waker's core and a wake-up costs a
  // fraction of that).
  const std::vector<int> cpus = cpus_for_threads(2);
  for (const Eigen::Index n : sizes) {
    const int rounds = round_trips;
    // The echo only moves payloads, which cannot throw; the timing side
    // allocates its payload before the echo starts.
    Tensor payload = Matrix(Matrix::Zero(1, n));
    std::vector<SimTime> rtt;
    rtt.reserve(static_cast<std::size_t>(rounds));
    on_cores(2, cpus, [&](int side) {
      if (side == 1) {
        for (int r = 0; r < rounds; ++r) {
          Tensor m;
          if (ping.take(r, forever, never, m) != Channel::Wait::kReady) return;
          pong.put(r, std::move(m));
        }
        return;
      }
      for (int r = 0; r < rounds; ++r) {
        const auto t0 = Clock::now();
        ping.put(r, std::move(payload));
        pong.take(r, forever, never, payload);
        rtt.push_back(elapsed(t0));
      }
    });
    bytes.push_back(static_cast<double>(n) * sizeof(float));
    one_way_s.push_back(static_cast<double>(median(rtt)) * 0.5e-9);
  }
  return fit_transport(bytes, one_way_s);
}

TransportFigures profile_device_transport(Device& from, Device& to, int repeats) {
  std::vector<double> bytes;
  std::vector<double> one_way_s;
  for (Eigen::Index n = 1; n <= (Eigen::Index{1} << 20); n *= 8) {
    const DeviceMatrix src = upload(from, Matrix::Zero(1, n));
    DeviceMatrix dst = to.matrix(1, n);
    std::vector<SimTime> t;
    for (int r = 0; r <= repeats; ++r) {
      from.synchronize();
      to.synchronize();
      const auto t0 = Clock::now();
      to.wait(*from.fence());
      to.copy_from(src, dst);
      to.synchronize();
      if (r > 0) t.push_back(elapsed(t0));  // the first copy sets up the path
    }
    bytes.push_back(static_cast<double>(n) * sizeof(float));
    one_way_s.push_back(static_cast<double>(median(t)) * 1e-9);
  }
  return fit_transport(bytes, one_way_s);
}

TransportFigures fit_transport(const std::vector<double>& bytes,
                               const std::vector<double>& one_way_s) {
  if (bytes.size() != one_way_s.size() || bytes.size() < 2) {
    throw std::invalid_argument("fit_transport needs two or more (bytes, time) pairs");
  }
  // The smallest payload's time is the latency (a fit's intercept would be
  // set by the largest payloads, whose noise exceeds a small message's whole
  // cost); the slope is the least-squares line through that point.
  std::size_t first = 0;
  for (std::size_t i = 1; i < bytes.size(); ++i) {
    if (bytes[i] < bytes[first]) first = i;
  }
  double sxx = 0.0;
  double sxy = 0.0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const double dx = bytes[i] - bytes[first];
    sxx += dx * dx;
    sxy += dx * (one_way_s[i] - one_way_s[first]);
  }
  const double slope = sxx > 0.0 ? sxy / sxx : 0.0;
  TransportFigures f;
  // Moving a payload costs about the same whatever its size: a slope at or below
  // zero (noise) means "no per-byte cost we can see", kept finite at 1 PB/s.
  f.bandwidth = slope > 1e-15 ? 1.0 / slope : 1e15;
  f.latency_s = std::max(0.0, one_way_s[first] - (slope > 1e-15 ? slope * bytes[first] : 0.0));
  return f;
}

}  // namespace pipescope::exec
