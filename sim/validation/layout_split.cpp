#include "sim/validation/layout_split.h"

#include <optional>
#include <utility>

#include "sim/validation/gpu_validation.h"

namespace pipescope {
namespace {

struct SplitErrors {
  std::vector<double> one, more;
};

std::optional<int> size_of(const PaperFigure& f, LayoutDimension dimension) {
  switch (dimension) {
    case LayoutDimension::kStages:
      return f.stages;
    case LayoutDimension::kTensorParallel:
      return f.tensor_parallel;
    case LayoutDimension::kChunks:
      return f.chunks;
  }
  return std::nullopt;
}

SplitSide split_side(std::vector<double> errors) {
  return {errors.size(), median_of(std::move(errors))};
}

LayoutSplit split_row(std::string publication, SplitErrors e) {
  return {std::move(publication), split_side(std::move(e.one)), split_side(std::move(e.more))};
}

}  // namespace

std::vector<LayoutSplit> layout_split(const ValidationReport& report, const std::string& table,
                                      LayoutDimension dimension) {
  std::vector<LayoutSplit> out;
  SplitErrors all;
  for (const PublicationFigures& p : figures_by_publication(report, table)) {
    SplitErrors errors;
    for (const PaperFigure* f : p.figures) {
      const std::optional<int> size = size_of(*f, dimension);
      if (!size) continue;
      for (SplitErrors* e : {&errors, &all})
        (*size > 1 ? e->more : e->one).push_back(faster_error(*f));
    }
    if (!errors.one.empty() || !errors.more.empty())
      out.push_back(split_row(p.publication, std::move(errors)));
  }
  if (!out.empty()) out.push_back(split_row("all", std::move(all)));
  return out;
}

}  // namespace pipescope
