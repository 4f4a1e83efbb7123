#pragma once
// The misses of a source's runs split by one dimension of their layout: its
// runs on one stage beside its pipelined ones, its runs without tensor
// parallelism beside those with it, or its pipelined runs of one model chunk
// a device beside its interleaved ones. A source whose runs of one kind agree
// while those of the other come out fast points at what that dimension pays
// (a pipeline's exchanges, waits and bubbles; tensor parallelism's
// collectives and narrower kernels; what each chunk of an interleaved
// schedule adds), not at what every run pays.

#include <cstddef>
#include <string>
#include <vector>

#include "sim/validation/gpipe_validation.h"

namespace pipescope {

// The dimension a split is taken along: K (PaperFigure::stages), T
// (PaperFigure::tensor_parallel) or, over pipelined runs, v
// (PaperFigure::chunks).
enum class LayoutDimension { kStages, kTensorParallel, kChunks };

// One side of a split: how many runs and the median of their faster_error
// (positive: the simulation is faster than the measurement).
struct SplitSide {
  std::size_t runs = 0;
  double median_faster = 0.0;  // 0 without runs
};

struct LayoutSplit {
  std::string publication;  // "all" for the row over every source's runs
  SplitSide one;            // the dimension 1 (K = 1, T = 1 or v = 1)
  SplitSide more;           // above 1
};

// For each publication of `table`'s figures that carry the dimension, in the
// order they first appear, then a last row "all" over every such figure.
// Empty when no figure carries it.
std::vector<LayoutSplit> layout_split(const ValidationReport& report, const std::string& table,
                                      LayoutDimension dimension);

}  // namespace pipescope
