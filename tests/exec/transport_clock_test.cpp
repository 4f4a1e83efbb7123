// The step's timeline counts from the instant the transport's begin_step
// returns: the MPI transport aligns the ranks' timelines by that instant, so a
// runtime that started its own clock later (a rank descheduled between the two)
// would shift that rank's events and show payloads landing before they left.

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../tiny_models.h"
#include "exec/data.h"
#include "exec/models.h"
#include "exec/runtime.h"
#include "exec/transport.h"
#include "sim/engine/partition.h"

namespace pipescope::exec {
namespace {

// The in-process transport, but its step clock's zero is `lead` before
// begin_step returns.
class EarlyZeroTransport final : public Transport {
 public:
  explicit EarlyZeroTransport(std::chrono::nanoseconds lead) : lead_(lead) {}
  std::vector<int> local_devices(int devices) const override {
    return inner_.local_devices(devices);
  }
  Clock::time_point begin_step(const Schedule& schedule) override {
    return inner_.begin_step(schedule) - lead_;
  }
  void send(TransferKind kind, int to_stage, int micro_batch, Tensor payload) override {
    inner_.send(kind, to_stage, micro_batch, std::move(payload));
  }
  Wait take(TransferKind kind, int to_stage, int micro_batch, Clock::time_point deadline,
            const std::atomic<bool>& aborted, Tensor& out) override {
    return inner_.take(kind, to_stage, micro_batch, deadline, aborted, out);
  }
  void wake_all() override { inner_.wake_all(); }
  std::string device_name(int device) const override { return inner_.device_name(device); }
  std::string route_name() const override { return inner_.route_name(); }

 private:
  InProcessTransport inner_;
  std::chrono::nanoseconds lead_;
};

TEST(TransportClock, TheTimelineCountsFromTheTransportsZero) {
  constexpr int kStages = 2, kM = 2;
  const std::chrono::hours lead(1);
  const TransformerParams p = testing::tiny_executor_transformer_params(2);
  LayerList all = build_transformer(p, 7);
  const int layers = static_cast<int>(all.size());
  RuntimeOptions options;
  options.transport = std::make_shared<EarlyZeroTransport>(lead);
  PipelineRuntime runtime(cut_into_stages(std::move(all), partition_uniform(layers, kStages)),
                          build_schedule(ScheduleKind::k1F1B, kStages, kM, Remat::kNever, 1),
                          options);
  TaskShape task;
  task.seq_len = static_cast<int>(p.seq_len);
  task.vocab = static_cast<int>(p.vocab);
  const StepResult r = runtime.step(synthetic_batch(task, 4, kM, 0, 7));
  ASSERT_FALSE(r.timeline.events.empty());
  const SimTime hour = std::chrono::duration_cast<std::chrono::nanoseconds>(lead).count();
  for (const TimelineEvent& e : r.timeline.events) {
    // Every event happened after begin_step returned, an hour after the zero,
    // and the step took less than another hour.
    EXPECT_GE(e.start, hour);
    EXPECT_LT(e.end, 2 * hour);
  }
}

}  // namespace
}  // namespace pipescope::exec
