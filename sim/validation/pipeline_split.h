#pragma once
// The misses of a source's pipelined runs beside those of its runs on one
// stage: whether a pipeline stage costs what the simulation says it costs.
// A source whose one-stage runs agree while its pipelined runs come out fast
// points at what the pipeline pays (its exchanges, waits and bubbles), not at
// the kernels both kinds run.

#include <cstddef>
#include <string>
#include <vector>

#include "sim/validation/gpipe_validation.h"

namespace pipescope {

// One side of the split: how many runs and the median of their
// faster_error (positive: the simulation is faster than the measurement).
struct SplitSide {
  std::size_t runs = 0;
  double median_faster = 0.0;  // 0 without runs
};

struct PipelineSplit {
  std::string publication;  // "all" for the row over every source's runs
  SplitSide single;         // K = 1
  SplitSide pipelined;      // K > 1
};

// For each publication of `table`'s figures that carry their stage count
// (PaperFigure::stages), in the order they first appear, then a last row
// "all" over every such figure. Empty when no figure carries one.
std::vector<PipelineSplit> pipeline_split(const ValidationReport& report, const std::string& table);

}  // namespace pipescope
