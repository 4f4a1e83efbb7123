#include "sim/engine/schedule_holds.h"

#include <tuple>

#include "costmodels/check.h"
#include "costmodels/shared_memo.h"
#include "sim/engine/custom_schedule.h"

namespace pipescope {
namespace {

using Shape = std::tuple<ScheduleKind, int, int, Remat, int, Checkpoint>;
struct ShapeHash {
  std::size_t operator()(const Shape& s) const {
    const auto [kind, devices, micro_batches, remat, chunks, checkpoint] = s;
    std::size_t h = static_cast<std::size_t>(kind);
    for (const int x :
         {devices, micro_batches, static_cast<int>(remat), chunks, static_cast<int>(checkpoint)}) {
      h = h * 1000003U + static_cast<std::size_t>(x);
    }
    return h;
  }
};

// Beyond this many shapes the memo starts again (a long-running desktop app
// plans many scenarios; one plan asks for a few thousand shapes at most).
constexpr std::size_t kMaxShapes = std::size_t{1} << 14;

ScheduleHolds count_holds(ScheduleKind kind, int devices, int micro_batches, Remat remat,
                          int chunks, Checkpoint checkpoint) {
  ScheduleHolds h;
  h.most = most_stashes_held(build_schedule(kind, devices, micro_batches, Remat::kNever, chunks));
  const bool rebuilt_until_w =
      splits_backward(kind) && (remat == Remat::kAlways || remat == Remat::kExceptLast);
  if (chunks > 1 || rebuilt_until_w) {
    h.at_peak =
        held_at_peak(build_schedule(kind, devices, micro_batches, remat, chunks), checkpoint);
  }
  return h;
}

}  // namespace

ScheduleHolds schedule_holds(ScheduleKind kind, int devices, int micro_batches, Remat remat,
                             int chunks, Checkpoint checkpoint) {
  PS_CHECK(kind != ScheduleKind::kCustom, "a custom schedule's holds depend on its file");
  static SharedMemo<Shape, ScheduleHolds, ShapeHash> memo(kMaxShapes);
  return memo.get(Shape{kind, devices, micro_batches, remat, chunks, checkpoint}, [&] {
    return count_holds(kind, devices, micro_batches, remat, chunks, checkpoint);
  });
}

}  // namespace pipescope
