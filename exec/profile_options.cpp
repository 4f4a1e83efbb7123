// What the profiler's options and a plan's stages may be (profiler.h).
#include "exec/profiler.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pipescope::exec {

namespace {

// Rows of one micro-batch's activations: beyond this the executor's int sizes
// (and this machine's memory) give out.
constexpr std::int64_t kMaxProfiledTokens = std::int64_t{1} << 24;

}  // namespace

void check_plan_stages(const PlanStages& plan, std::size_t layers) {
  const std::vector<LayerRange>& r = plan.stage_layers;
  bool ok = !r.empty() && r.front().begin == 0 && r.back().end == layers &&
            static_cast<int>(r.size()) == plan.schedule.stages &&
            plan.schedule.stage_device.size() == r.size();
  for (std::size_t s = 0; ok && s < r.size(); ++s) {
    ok = r[s].begin < r[s].end && (s == 0 || r[s].begin == r[s - 1].end);
  }
  if (!ok) {
    throw std::invalid_argument("the plan's stages do not cut the model's " +
                                std::to_string(layers) + " layers in order");
  }
}

void check_profile_options(const ModelSpec& spec, const ProfileOptions& o) {
  if (o.batch_sizes.empty()) throw std::invalid_argument("no micro-batch sizes to profile");
  for (std::size_t i = 0; i < o.batch_sizes.size(); ++i) {
    if (o.batch_sizes[i] < 1 || o.batch_sizes[i] > (1 << 20) ||
        (i > 0 && o.batch_sizes[i] <= o.batch_sizes[i - 1])) {
      throw std::invalid_argument("micro-batch sizes must be ascending, distinct and in [1, 2^20]");
    }
  }
  if (o.repeats < 1) throw std::invalid_argument("repeats must be at least 1");
  if (o.stages && (o.device || o.batch_sizes.size() != 1)) {
    throw std::invalid_argument(
        "a plan's op lists are profiled on the host at its one micro-batch size");
  }
  const std::int64_t seq = spec.tokens_per_sample;
  if (o.batch_sizes.back() > kMaxProfiledTokens / std::max<std::int64_t>(1, seq)) {
    throw std::invalid_argument("micro-batch size " + std::to_string(o.batch_sizes.back()) + " x " +
                                std::to_string(seq) +
                                " tokens per sample is more than the executor takes in one "
                                "micro-batch (" +
                                std::to_string(kMaxProfiledTokens) + " tokens)");
  }
}

}  // namespace pipescope::exec
